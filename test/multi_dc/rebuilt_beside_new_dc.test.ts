/**
 * A data center rebuilt with an empty Redis while a new one joins, both while the DC that holds the
 * data is down, with real nats-server, redis-server, counter nodes and gateways per DC
 * (test/support/multi_dc.ts). dc1 and dc2 run and take likes; dc3 is added later. Then dc2 goes down
 * whole, dc1 dies and comes back empty, and dc3 starts empty: dc1 and dc3 hear each other and nothing
 * else. Each answers the other's requests while it is still learning every partition itself, so
 * neither may learn from the other: had dc1 taken dc3's empty answers for its state, it would serve
 * an empty store and count its next likes from zero, under the entries dc2 still holds for it, where
 * they would hide (merge is a per-entry max). Both must serve nothing until dc2 is back, then hold
 * every entry, dc1 its own old ones included.
 */
import { expect, test } from "vitest";
import { describeWithServers } from "../support/servers.js";
import {
  CONVERGE_MS,
  UNLINKED_WINDOW_MS,
  addLikes,
  expectLikesEntries,
  expectServesNothing,
  expectTotals,
  pageIds,
  publisherOf,
  type Expected,
} from "../support/dc_pages.js";
import { eventually } from "../support/eventually.js";
import { startDataCenters, type TestDc } from "../support/multi_dc.js";

const PAGES = 100;
/** Likes dc1 and dc3 each add to every page once both are ready. */
const LIKES_AFTER = 2;
const TEST_TIMEOUT_MS = 120_000;

interface Progress {
  readonly learningTogether: number;
  readonly unreachable: readonly string[];
}

/** The "bootstrap in progress" lines a DC's counter nodes wrote (LIVECOUNT_LOG_LEVEL=info). */
function progressLines(dc: TestDc): Progress[] {
  return dc.counters.flatMap((node) =>
    node
      .log()
      .split("\n")
      .filter((line) => line.includes('"bootstrap in progress"'))
      .map((line) => JSON.parse(line) as Progress),
  );
}

describeWithServers("multi-dc - a data center rebuilt while a new one joins", () => {
  test(
    "multi-dc - a DC rebuilt beside a new DC learns nothing from it: both serve nothing until the DC holding the entries is back, then hold all of them",
    async () => {
      const multi = await startDataCenters({
        dcs: ["dc1", "dc2", "dc3"],
        counters: 1,
        late: ["dc3"],
        dcEnv: {
          // Info, for the "bootstrap in progress" lines that show what dc1 waits for.
          dc1: { LIVECOUNT_PEER_DCS: "dc2", LIVECOUNT_LOG_LEVEL: "info" },
          dc2: { LIVECOUNT_PEER_DCS: "dc1" },
          dc3: { LIVECOUNT_PEER_DCS: "dc1,dc2", LIVECOUNT_LOG_LEVEL: "info" },
        },
      });
      const [dc1, dc2, dc3] = [multi.dc("dc1"), multi.dc("dc2"), multi.dc("dc3")];

      // --- dc1 and dc2 take likes and agree ----------------------------------------------------------
      const pages = pageIds("beside-new", PAGES);
      const dc1Likes = new Map(pages.map((page, i) => [page, 1 + (i % 4)]));
      const dc2Likes = new Map(pages.filter((_, i) => i % 2 === 0).map((page) => [page, 5]));
      await addLikes(dc1, dc1Likes, "dc1-before");
      await addLikes(dc2, dc2Likes, "dc2-before");
      const before = (page: string): Expected => ({
        viewers: 0,
        likes: dc1Likes.get(page)! + (dc2Likes.get(page) ?? 0),
      });
      for (const dc of [dc1, dc2]) {
        await eventually(() => expectTotals(dc, pages, before), {
          timeoutMs: CONVERGE_MS,
          message: `${dc.name} shows both DCs' likes`,
        });
      }
      // dc2 holds dc1's entries: what dc1 must get back, and from dc2 alone.
      await expectLikesEntries(dc2, "dc1", pages, (p) => dc1Likes.get(p)!);

      // --- dc2 goes down; dc1 is rebuilt empty while dc3 joins ---------------------------------------
      await dc2.kill();
      await dc1.kill();
      dc1.redis.wipe();
      const dc1LinesBefore = progressLines(dc1).length;
      await Promise.all([dc1.launch(), dc3.launch()]);
      await multi.waitLinked();
      // dc1 and dc3 hear each other, and neither may serve or take a like: all either could learn
      // from the other is an empty partition.
      const [dc1Refusals, dc3Refusals] = await Promise.all([
        expectServesNothing(dc1, pages.slice(0, 10), UNLINKED_WINDOW_MS),
        expectServesNothing(dc3, pages.slice(0, 10), UNLINKED_WINDOW_MS),
      ]);
      for (const dc of [dc1, dc3]) {
        const early = await publisherOf(dc).change(pages[0]!, "likes", 1, `${dc.name}-while-learning`);
        expect(early.status, `a like in ${dc.name} while it learns: ${JSON.stringify(early.body)}`).toBe(503);
        expect(early.headers.get("retry-after")).not.toBeNull();
      }
      // Not because they could not hear each other: each answered the other, as a learner, and
      // dc1 waits for dc2, which it cannot hear.
      const waiting = progressLines(dc1).slice(dc1LinesBefore);
      expect(
        waiting.some((line) => line.learningTogether > 0 && line.unreachable.includes("dc2")),
        `dc1's progress lines while dc2 is down: ${JSON.stringify(waiting)}`,
      ).toBe(true);
      expect(progressLines(dc3).some((line) => line.learningTogether > 0)).toBe(true);

      // --- dc2 comes back: dc1 and dc3 learn every entry from it -------------------------------------
      const backAt = Date.now();
      await dc2.start();
      await multi.waitLinked();
      await Promise.all([dc1.waitBalanced(), dc3.waitBalanced()]);
      const readyMs = Date.now() - backAt;
      for (const dc of [dc1, dc3]) {
        await expectLikesEntries(dc, "dc1", pages, (p) => dc1Likes.get(p)!);
        await expectLikesEntries(dc, "dc2", [...dc2Likes.keys()], (p) => dc2Likes.get(p)!);
      }

      // --- new likes in dc1 and dc3 count on top of the old ones, in every DC ---------------------
      const after = new Map(pages.map((page) => [page, LIKES_AFTER]));
      await addLikes(dc1, after, "dc1-after");
      await addLikes(dc3, after, "dc3-after");
      await expectLikesEntries(dc1, "dc1", pages, (p) => dc1Likes.get(p)! + LIKES_AFTER);
      const total = (page: string): Expected => ({
        viewers: 0,
        likes: before(page).likes + 2 * LIKES_AFTER,
      });
      for (const dc of [dc1, dc2, dc3]) {
        await eventually(() => expectTotals(dc, pages, total), {
          timeoutMs: CONVERGE_MS,
          message: `${dc.name} shows the old likes and dc1's and dc3's new ones`,
        });
      }
      await expectLikesEntries(dc2, "dc1", pages, (p) => dc1Likes.get(p)! + LIKES_AFTER);

      console.info(
        `multi-dc rebuilt beside new: ${JSON.stringify({ pages: PAGES, dc1Refusals, dc3Refusals, dc2BackToReadyMs: readyMs })}`,
      );
    },
    TEST_TIMEOUT_MS,
  );
});
