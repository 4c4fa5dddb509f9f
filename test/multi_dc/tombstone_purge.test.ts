/**
 * Purging tombstones (POST /v1/admin/purge) on real processes in two DCs, with the link between
 * them cut while one DC purges, so the other still holds the purged counters when they meet again
 * (anti-entropy every second, so DCs confirm what they hold in common quickly):
 * - dc1 purges a deleted counter whose entries are all zero (written in one DC only); dc2, cut off,
 *   still holds it. After the heal neither DC holds anything of it and their digests agree: dc2
 *   purges on hearing dc1's heartbeats. (Which comes first after the heal, that or anti-entropy
 *   sending dc2's copy to dc1, is a race; that a merge leaves such a copy out is pinned by the store
 *   contract, packages/store/test/purge_contract.ts.)
 * - a deleted counter whose delete cancelled the other DC's value in its own entry stays (kept),
 *   hidden in both DCs.
 * - a counter deleted while the link was cut waits (dc2 never got the delete, and would send it
 *   back as it was): dc1 purges it on its own once anti-entropy shows dc2 holds the tombstone; dc2,
 *   which learnt it after the cutoff, keeps it until the next purge. Their digests agree meanwhile
 *   (a settled delete counts nothing), and the counter never shows again in either DC.
 * - a like after the purge counts exactly once in both DCs, from whichever DC.
 */
import { Redis } from "ioredis";
import { isSeriesCounter } from "@livecount/protocol";
import { expect, onTestFinished, test } from "vitest";
import { describeWithServers } from "../support/servers.js";
import { CLUSTER_ADMIN_KEY, CLUSTER_PUBLISHER_KEY } from "../support/cluster.js";
import { eventually, sleep } from "../support/eventually.js";
import { DC_TIMINGS, startDataCenters, type TestDc } from "../support/multi_dc.js";
import { PublisherHttp } from "../support/publisher_http.js";

const TEST_TIMEOUT_MS = 90_000;
const CONVERGE_MS = 15_000;

const SOLO = "purge/solo";
const BOTH = "purge/both";
const MISSED = "purge/missed";
/** Anti-entropy rounds for this test, and how long to let a few of them run. */
const ANTI_ENTROPY_MS = 1000;
/**
 * How long every other DC must have held a tombstone before it may be purged: two anti-entropy
 * periods and the DC lease; waited out with two rounds more.
 */
const PURGE_GRACE_MS = 2 * ANTI_ENTROPY_MS + DC_TIMINGS.leaseMs;
const A_FEW_ROUNDS_MS = PURGE_GRACE_MS + 2 * ANTI_ENTROPY_MS;

interface PurgeBody {
  dc: string;
  pages: number;
  counters: number;
  kept: number;
  failed: number;
  waiting: number;
  nodes: Array<{ id: string; counters?: number; error?: string }>;
}

const publisher = (dc: TestDc): PublisherHttp =>
  new PublisherHttp(dc.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
const admin = (dc: TestDc): PublisherHttp => new PublisherHttp(dc.gateways[0]!.url, CLUSTER_ADMIN_KEY);

/** The counters of a page's hash in a DC's Redis (fields are `{counter}\0{dc}`). */
/** The counters a DC's Redis holds of a page, time buckets (windows, visitors, peaks) left out. */
async function storedCounters(redis: Redis, page: string): Promise<string[]> {
  const fields = await redis.hkeys(`lc:page:${page}`);
  return [...new Set(fields.map((f) => f.split("\u0000")[0]!))].filter((c) => !isSeriesCounter(c)).sort();
}

describeWithServers("multi-dc - purging tombstones", () => {
  test(
    "multi-dc - a purge reaches the other DC after a cut, keeps what must stay, waits for a delete the other DC missed, and likes after it count once",
    async () => {
      const multi = await startDataCenters({
        counters: 2,
        env: { LIVECOUNT_ANTI_ENTROPY_MS: String(ANTI_ENTROPY_MS) },
      });
      const [dc1, dc2] = [multi.dc("dc1"), multi.dc("dc2")];
      const redis = new Map(multi.dcs.map((dc) => [dc.name, new Redis(dc.redis.url)]));
      onTestFinished(() => {
        for (const r of redis.values()) r.disconnect();
      });
      const stored = (dc: TestDc, page: string): Promise<string[]> =>
        storedCounters(redis.get(dc.name)!, page);
      const counters = async (dc: TestDc, ...pages: string[]): Promise<Array<Record<string, number>>> =>
        (await publisher(dc).totals(...pages)).map((t) => ({ ...t.counters }));
      const digests = async (dc: TestDc): Promise<string[]> => {
        const r = redis.get(dc.name)!;
        const keys = (await r.keys("lc:digest:*")).sort();
        return Promise.all(keys.map(async (k) => `${k}=${await r.hget(k, "all")}`));
      };
      const purge = () =>
        admin(dc1).request<PurgeBody>("POST", "/v1/admin/purge", { body: { older_than_s: 0 } });

      // --- likes: SOLO and MISSED written in dc1 only, BOTH in both --------------------------------------
      const seeded = await publisher(dc1).batch([
        { page: SOLO, counter: "likes", change: 5, id: "solo-likes" },
        { page: SOLO, counter: "shares", change: 2, id: "solo-shares" },
        { page: BOTH, counter: "likes", change: 3, id: "both-1" },
        { page: MISSED, counter: "likes", change: 6, id: "missed-likes" },
      ]);
      expect(seeded.status).toBe(200);
      expect(
        (await publisher(dc2).batch([{ page: BOTH, counter: "likes", change: 4, id: "both-2" }])).status,
      ).toBe(200);
      for (const dc of multi.dcs)
        await eventually(
          async () =>
            expect(await counters(dc, SOLO, BOTH, MISSED)).toEqual([
              { likes: 5, shares: 2 },
              { likes: 7 },
              { likes: 6 },
            ]),
          { timeoutMs: CONVERGE_MS, message: `${dc.name} sees the likes` },
        );

      // --- SOLO and BOTH deleted while linked; both DCs hold the tombstones ------------------------------
      for (const page of [SOLO, BOTH]) expect((await publisher(dc1).remove(page, "likes")).status).toBe(200);
      for (const dc of multi.dcs)
        await eventually(
          async () => {
            expect(await counters(dc, SOLO, BOTH)).toEqual([{ shares: 2 }, {}]);
            expect(await stored(dc, SOLO)).toEqual(["@del:likes", "likes", "shares"]);
          },
          { timeoutMs: CONVERGE_MS, message: `${dc.name} holds the deletes` },
        );
      await sleep(A_FEW_ROUNDS_MS);

      // --- cut: MISSED deleted where dc2 cannot hear it, then dc1 purges -----------------------------------
      multi.cut();
      expect((await publisher(dc1).remove(MISSED, "likes")).status).toBe(200);
      const first = await purge();
      expect(first.status).toBe(200);
      expect(first.body).toMatchObject({ dc: "dc1", pages: 1, counters: 1, kept: 1, failed: 0 });
      expect(first.body.waiting).toBeGreaterThan(0);
      expect(first.body.nodes.map((n) => n.error)).toEqual([undefined, undefined]);
      expect(await stored(dc1, SOLO)).toEqual(["shares"]);
      expect(await stored(dc1, BOTH)).toEqual(["@del:likes", "likes"]);
      expect(await stored(dc1, MISSED)).toEqual(["@del:likes", "likes"]);
      expect(await stored(dc2, SOLO)).toEqual(["@del:likes", "likes", "shares"]);
      const consoleView = await admin(dc1).request<{ counters: Array<{ name: string }> }>(
        "GET",
        `/v1/admin/pages/${encodeURIComponent(SOLO)}`,
      );
      expect(consoleView.body.counters.map((c) => c.name)).toEqual(["shares"]);

      // --- healed: dc2 purges SOLO on hearing dc1; dc1 purges MISSED once dc2 holds its tombstone ------------
      multi.heal();
      await multi.waitLinked();
      await eventually(
        async () => {
          expect(await stored(dc2, SOLO)).toEqual(["shares"]);
          expect(await stored(dc1, MISSED)).toEqual([]);
        },
        { timeoutMs: CONVERGE_MS, message: "dc2 purged SOLO, dc1 purged MISSED" },
      );
      // dc2 learnt MISSED's delete after the cutoff: it keeps it, hidden, and the digests agree anyway.
      expect(await stored(dc2, MISSED)).toEqual(["@del:likes", "likes"]);
      await eventually(async () => expect(await digests(dc1)).toEqual(await digests(dc2)), {
        timeoutMs: CONVERGE_MS,
        message: "both DCs' digests agree",
      });
      for (const dc of multi.dcs) {
        expect(await counters(dc, SOLO, BOTH, MISSED)).toEqual([{ shares: 2 }, {}, {}]);
        expect(await stored(dc, BOTH)).toEqual(["@del:likes", "likes"]);
      }
      // The next purge reaches dc2's copy too.
      await sleep(A_FEW_ROUNDS_MS);
      expect((await purge()).status).toBe(200);
      await eventually(async () => expect(await stored(dc2, MISSED)).toEqual([]), {
        timeoutMs: CONVERGE_MS,
        message: "dc2 purged MISSED",
      });

      // --- likes after the purge count exactly once, in both DCs ------------------------------------------
      expect((await publisher(dc2).change(SOLO, "likes", 1, "after-1")).status).toBe(200);
      expect((await publisher(dc1).change(SOLO, "likes", 2, "after-2")).status).toBe(200);
      expect((await publisher(dc2).change(MISSED, "likes", 1, "after-3")).status).toBe(200);
      for (const dc of multi.dcs)
        await eventually(
          async () =>
            expect(await counters(dc, SOLO, MISSED)).toEqual([{ likes: 3, shares: 2 }, { likes: 1 }]),
          { timeoutMs: CONVERGE_MS, message: `${dc.name} counts the likes after the purge` },
        );
    },
    TEST_TIMEOUT_MS,
  );
});
