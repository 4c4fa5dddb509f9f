/**
 * A data center rebuilt with an empty Redis gets its own entries back from its peer (seed 000's New
 * Server Problem), with real nats-server, redis-server, counter nodes and gateways per DC
 * (test/support/multi_dc.ts). dc1 dies whole (kill -9 of every process, its servers included) and
 * comes back with its Redis dir wiped, first cut off from dc2, its only listed peer: meanwhile it must
 * serve nothing and take no like. dc2 still holds dc1's entries; once linked, dc1 must show them
 * again, as its own, before it serves, so that its next likes count on top of them: without that its
 * entry would restart at zero and stay hidden under the maximum dc2 holds (merge is a per-entry max).
 */
import { expect, onTestFinished, test } from "vitest";
import { describeWithServers } from "../support/servers.js";
import {
  CONVERGE_MS,
  UNLINKED_WINDOW_MS,
  addLikes,
  counterMetric,
  expectLikesEntries,
  expectServesNothing,
  expectTotals,
  pageIds,
  publisherOf,
  readRaw,
  type Expected,
} from "../support/dc_pages.js";
import { eventually } from "../support/eventually.js";
import { startDataCenters } from "../support/multi_dc.js";
import { TestClient } from "../support/ws_client.js";

const PAGES = 200;
/** Pages with viewers in dc1 before it dies (the first ones). */
const PAGES_WITH_VIEWERS = 10;
/** Likes dc1 adds to every page once rebuilt. */
const LIKES_AFTER = 3;
const TEST_TIMEOUT_MS = 90_000;

describeWithServers("multi-dc - a data center rebuilt with an empty Redis", () => {
  test(
    "multi-dc - a DC rebuilt with an empty Redis gets its own entries back from its peer before it serves, and its next likes count on top of them",
    async () => {
      const multi = await startDataCenters({
        counters: 2,
        dcEnv: { dc1: { LIVECOUNT_PEER_DCS: "dc2" }, dc2: { LIVECOUNT_PEER_DCS: "dc1" } },
      });
      const dc1 = multi.dc("dc1");
      const dc2 = multi.dc("dc2");
      const clients: TestClient[] = [];
      onTestFinished(async () => {
        await Promise.all(clients.map((c) => c.terminate()));
      });

      // --- likes in both DCs, viewers in dc1 --------------------------------------------------------
      const pages = pageIds("rebuilt", PAGES);
      const dc1Likes = new Map(pages.map((page, i) => [page, 1 + (i % 5)]));
      const dc2Likes = new Map(pages.filter((_, i) => i % 3 === 0).map((page) => [page, 2]));
      await addLikes(dc1, dc1Likes, "dc1-before");
      await addLikes(dc2, dc2Likes, "dc2-before");
      const viewerPages = pages.slice(0, PAGES_WITH_VIEWERS);
      const viewers = await TestClient.connect(dc1.gateways[0]!.wsUrl);
      clients.push(viewers);
      for (const page of viewerPages) viewers.join(page, "viewer-0");
      const before = (page: string): Expected => ({
        viewers: viewerPages.includes(page) ? 1 : 0,
        likes: dc1Likes.get(page)! + (dc2Likes.get(page) ?? 0),
      });
      for (const dc of [dc1, dc2]) {
        await eventually(() => expectTotals(dc, pages, before), {
          timeoutMs: CONVERGE_MS,
          message: `${dc.name} shows both DCs' likes and dc1's viewers`,
        });
      }
      // dc2 holds dc1's entries: what dc1 will get back.
      await expectLikesEntries(dc2, "dc1", pages, (p) => dc1Likes.get(p)!);
      const viewersHeld = await readRaw(dc2, viewerPages);

      // --- dc1 dies whole and is rebuilt empty, first cut off from dc2 ---------------------------------
      await dc1.kill();
      await viewers.terminate();
      dc1.redis.wipe();
      // With dc2 listed as its peer and unreachable, dc1 must not serve, nor take a like: counted
      // on its empty store, a like would restart dc1's entry below what dc2 holds, and hide there.
      multi.cut();
      await dc1.launch();
      const refusals = await expectServesNothing(dc1, pages.slice(0, 10), UNLINKED_WINDOW_MS);
      const early = await publisherOf(dc1).change(pages[0]!, "likes", 1, "dc1-while-unlinked");
      // Refused, retryable.
      expect(early.status, `a like in dc1 while it cannot bootstrap: ${JSON.stringify(early.body)}`).toBe(
        503,
      );
      expect(early.headers.get("retry-after")).not.toBeNull();
      multi.heal();
      const healedAt = Date.now();
      // Ready: every counter node of dc1 holds every partition it wants, bootstrapped.
      await dc1.waitBalanced();
      const readyAt = Date.now();
      await multi.waitLinked();

      // Ready means its own entries are back, with their old values, in dc1's own store.
      await expectLikesEntries(dc1, "dc1", pages, (p) => dc1Likes.get(p)!);
      await expectLikesEntries(dc1, "dc2", [...dc2Likes.keys()], (p) => dc2Likes.get(p)!);
      const received = await counterMetric(
        dc1,
        "livecount_counter_anti_entropy_pages_total",
        'direction="received"',
      );
      // Its Redis really was empty: every page came from dc2, none from an AOF.
      expect(received).toBeGreaterThanOrEqual(PAGES);
      // Presence is monotonic too: dc1's viewers entries restart from what dc2 held for it, never below.
      const viewersBack = await readRaw(dc1, viewerPages);
      for (const page of viewerPages) {
        const held = viewersHeld.get(page)!.viewers.dc1!;
        const back = viewersBack.get(page)!.viewers.dc1;
        expect(back, `dc1's viewers entry of ${page} once rebuilt`).toBeDefined();
        expect(back!.p, `dc1's viewers p of ${page}`).toBeGreaterThanOrEqual(held.p);
        expect(back!.n, `dc1's viewers n of ${page}`).toBeGreaterThanOrEqual(held.n);
      }

      // --- dc1's next likes count on top of the old ones, in both DCs ----------------------------------
      await addLikes(dc1, new Map(pages.map((page) => [page, LIKES_AFTER])), "dc1-after");
      const after = (page: string): Expected => ({ viewers: 0, likes: before(page).likes + LIKES_AFTER });
      const afterAcked = Date.now();
      // Acknowledged means durable in dc1: its reads show the sum at once.
      await expectLikesEntries(dc1, "dc1", pages, (p) => dc1Likes.get(p)! + LIKES_AFTER);
      // The viewers dc1 had died with it: they stop counting once its owners settle the pages.
      for (const dc of [dc1, dc2]) {
        await eventually(() => expectTotals(dc, pages, after), {
          timeoutMs: CONVERGE_MS,
          message: `${dc.name} shows dc1's old likes plus its new ones, and no dead viewers`,
        });
      }
      const dc2ExactAt = Date.now();
      await expectLikesEntries(dc2, "dc1", pages, (p) => dc1Likes.get(p)! + LIKES_AFTER);

      const report = {
        pages: PAGES,
        dc1EntriesRecovered: PAGES,
        dc1ReadStatusesWhileUnlinked: refusals,
        dc1HealToReadyMs: readyAt - healedAt,
        antiEntropyPagesReceivedByDc1: received,
        newLikesAckedToBothExactMs: dc2ExactAt - afterAcked,
      };
      console.info(`multi-dc rebuilt DC: ${JSON.stringify(report)}`);
    },
    TEST_TIMEOUT_MS,
  );
});
