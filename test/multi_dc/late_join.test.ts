/**
 * A data center that joins late, with an empty Redis, learns every page from durable state: real
 * nats-server, redis-server, counter nodes and gateways per DC (test/support/multi_dc.ts). dc1 runs
 * alone and takes likes and viewers; its counter nodes then restart, so no process remembers what
 * changed; only then does dc2 start, and nothing happens in dc1 from then on. dc2 starts cut off
 * from dc1, its only listed peer, and must serve nothing (not ready, every read refused); once
 * linked, it must report ready only holding every page's exact value, untouched pages included
 * (issue 9, "Done means"). Without bootstrap, dc2 would serve its empty store (the cut keeps
 * anti-entropy from filling it first); without anti-entropy from durable state it would never learn
 * anything: the only other path, dc1 publishing its changes again, needs a memory of them the
 * restart erased.
 */
import { expect, onTestFinished, test } from "vitest";
import { describeWithServers } from "../support/servers.js";
import {
  CONVERGE_MS,
  PageWatchers,
  UNLINKED_WINDOW_MS,
  addLikes,
  counterMetric,
  expectServesNothing,
  expectTotals,
  pageIds,
  readTotals,
  wrongPages,
  type Expected,
} from "../support/dc_pages.js";
import { eventually } from "../support/eventually.js";
import { startDataCenters } from "../support/multi_dc.js";
import { TestClient } from "../support/ws_client.js";

const PAGES = 300;
/** Pages with viewers in dc1 (the first ones); each has 1 to VIEWER_SOCKETS of them. */
const PAGES_WITH_VIEWERS = 30;
const VIEWER_SOCKETS = 3;
const TEST_TIMEOUT_MS = 90_000;

describeWithServers("multi-dc - a data center that joins late", () => {
  test(
    "multi-dc - a DC that joins late with an empty Redis is ready only with every page's exact value, after the other DC's counter nodes restarted and with no new traffic",
    async () => {
      const multi = await startDataCenters({
        counters: 2,
        late: ["dc2"],
        // dc1 is the first DC of the deployment; dc2 must learn from it before it serves.
        dcEnv: { dc2: { LIVECOUNT_PEER_DCS: "dc1" } },
      });
      const dc1 = multi.dc("dc1");
      const dc2 = multi.dc("dc2");
      const clients: TestClient[] = [];
      onTestFinished(async () => {
        await Promise.all(clients.map((c) => c.terminate()));
      });

      // --- dc1 alone: likes on every page, viewers on some ------------------------------------------
      const pages = pageIds("late", PAGES);
      const likes = new Map(pages.map((page, i) => [page, 1 + ((i * 7) % 11)]));
      await addLikes(dc1, likes, "before");
      const viewers = new Map(pages.map((page, i) => [page, i < PAGES_WITH_VIEWERS ? 1 + (i % 3) : 0]));
      for (let s = 0; s < VIEWER_SOCKETS; s++) {
        const client = await TestClient.connect(dc1.gateways[0]!.wsUrl);
        clients.push(client);
        for (const [page, n] of viewers) if (s < n) client.join(page, `viewer-${s}`);
      }
      const expected = (page: string): Expected => ({
        viewers: viewers.get(page)!,
        likes: likes.get(page)!,
      });
      await eventually(() => expectTotals(dc1, pages, expected), {
        timeoutMs: CONVERGE_MS,
        message: "dc1 shows its likes and viewers",
      });

      // --- dc1's counter nodes restart: no process remembers what changed ---------------------------
      await Promise.all(dc1.counters.map((c) => c.terminate()));
      await Promise.all(dc1.counters.map((c) => c.start()));
      await dc1.waitBalanced();
      // The gateway resyncs its viewers to the new owners; from here on nothing changes in dc1.
      await eventually(() => expectTotals(dc1, pages, expected), {
        timeoutMs: CONVERGE_MS,
        message: "dc1 shows its likes and viewers after its counter nodes restarted",
      });

      // --- dc2 joins with an empty Redis, first cut off from dc1 ---------------------------------------
      // With dc1 listed as its peer and unreachable, dc2 must not serve: ready, it would answer with
      // its empty store. Unlinked, its nodes become ready in about 2 s, well within the window.
      multi.cut();
      await dc2.launch();
      const refusals = await expectServesNothing(dc2, pages.slice(0, 10), UNLINKED_WINDOW_MS);
      multi.heal();
      const healedAt = Date.now();
      // Ready: every counter node of dc2 holds every partition it wants, bootstrapped.
      await dc2.waitBalanced();
      const readyAt = Date.now();
      await multi.waitLinked();
      // Ready means bootstrapped: the first reads after it already hold every like.
      const first = await readTotals(dc2, pages);
      const likesOnly = (page: string): Expected => ({
        viewers: first.get(page)?.viewers ?? -1,
        likes: likes.get(page)!,
      });
      const wrongAtReady = wrongPages((p) => first.get(p), pages, likesOnly);
      expect(wrongAtReady.count, `likes wrong in dc2 once ready: ${wrongAtReady.examples.join("; ")}`).toBe(
        0,
      );
      // dc1's viewers count in dc2 as soon as its gateway has heard dc1 live.
      await eventually(() => expectTotals(dc2, pages, expected), {
        timeoutMs: CONVERGE_MS,
        message: "dc2 reads every page's likes and dc1's viewers",
      });
      const httpExactAt = Date.now();
      const watchers = await PageWatchers.open(dc2, pages);
      onTestFinished(() => watchers.close());
      await eventually(() => watchers.expect(expected), {
        timeoutMs: CONVERGE_MS,
        message: "a watcher in dc2 sees every page's value",
      });
      const watchersExactAt = Date.now();

      // dc2's state came from dc1's store: dc1 sent every page, dc2 received them.
      const sent = await counterMetric(dc1, "livecount_counter_anti_entropy_pages_total", 'direction="sent"');
      const received = await counterMetric(
        dc2,
        "livecount_counter_anti_entropy_pages_total",
        'direction="received"',
      );
      expect(sent).toBeGreaterThanOrEqual(PAGES);
      expect(received).toBeGreaterThanOrEqual(PAGES);
      // And dc1 still shows what it showed: learning took nothing from it.
      await expectTotals(dc1, pages, expected);

      const report = {
        pages: PAGES,
        likes: [...likes.values()].reduce((a, b) => a + b, 0),
        viewers: [...viewers.values()].reduce((a, b) => a + b, 0),
        dc2ReadStatusesWhileUnlinked: refusals,
        dc2HealToReadyMs: readyAt - healedAt,
        dc2ReadyToHttpExactMs: httpExactAt - readyAt,
        dc2ReadyToWatchersExactMs: watchersExactAt - readyAt,
        antiEntropyPages: { sentByDc1: sent, receivedByDc2: received },
      };
      console.info(`multi-dc late join: ${JSON.stringify(report)}`);
    },
    TEST_TIMEOUT_MS,
  );
});
