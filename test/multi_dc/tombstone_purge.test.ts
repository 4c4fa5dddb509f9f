/**
 * Purging tombstones (POST /v1/admin/purge) on real processes in two DCs, with the link between
 * them cut while one DC purges, so the other still holds the purged counters when they meet again:
 * - dc1 purges a deleted counter whose entries are all zero (written in one DC only); dc2, cut off,
 *   still holds it. After the heal neither DC holds anything of it and their digests agree: dc2
 *   purges on hearing dc1's heartbeats. (Which comes first after the heal, that or anti-entropy
 *   sending dc2's copy to dc1, is a race; that a merge leaves such a copy out is pinned by the store
 *   contract, packages/store/test/purge_contract.ts.)
 * - a deleted counter whose delete cancelled the other DC's value in its own entry stays (kept),
 *   hidden in both DCs.
 * - a like after the purge counts exactly once in both DCs, from whichever DC.
 */
import { Redis } from "ioredis";
import { expect, onTestFinished, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { CLUSTER_ADMIN_KEY, CLUSTER_PUBLISHER_KEY } from "../support/cluster.js";
import { eventually } from "../support/eventually.js";
import { startDataCenters, type TestDc } from "../support/multi_dc.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { PublisherHttp } from "../support/publisher_http.js";
import { redisServerAvailable } from "../support/redis_server.js";

const TEST_TIMEOUT_MS = 90_000;
const CONVERGE_MS = 15_000;

const SOLO = "purge/solo";
const BOTH = "purge/both";

interface PurgeBody {
  dc: string;
  pages: number;
  counters: number;
  kept: number;
  failed: number;
  nodes: Array<{ id: string; counters?: number; error?: string }>;
}

const publisher = (dc: TestDc): PublisherHttp =>
  new PublisherHttp(dc.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
const admin = (dc: TestDc): PublisherHttp => new PublisherHttp(dc.gateways[0]!.url, CLUSTER_ADMIN_KEY);

/** The counters of a page's hash in a DC's Redis (fields are `{counter}\0{dc}`). */
async function storedCounters(redis: Redis, page: string): Promise<string[]> {
  const fields = await redis.hkeys(`lc:page:${page}`);
  return [...new Set(fields.map((f) => f.split("\u0000")[0]!))].sort();
}

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "multi-dc - purging tombstones",
  () => {
    test(
      "multi-dc - a purge in one DC reaches the other after a cut, keeps what must stay, and a later like counts once",
      async () => {
        const multi = await startDataCenters({ counters: 2 });
        const [dc1, dc2] = [multi.dc("dc1"), multi.dc("dc2")];
        const redis = new Map(multi.dcs.map((dc) => [dc.name, new Redis(dc.redis.url)]));
        onTestFinished(() => {
          for (const r of redis.values()) r.disconnect();
        });

        // --- deleted counters: one written in dc1 only, one written in both ------------------------------
        expect(
          (
            await publisher(dc1).batch([
              { page: SOLO, counter: "likes", change: 5, id: "solo-likes" },
              { page: SOLO, counter: "shares", change: 2, id: "solo-shares" },
              { page: BOTH, counter: "likes", change: 3, id: "both-1" },
            ])
          ).status,
        ).toBe(200);
        expect(
          (await publisher(dc2).batch([{ page: BOTH, counter: "likes", change: 4, id: "both-2" }])).status,
        ).toBe(200);
        for (const dc of multi.dcs)
          await eventually(
            async () =>
              expect((await publisher(dc).totals(SOLO, BOTH)).map((t) => t.counters)).toEqual([
                { likes: 5, shares: 2 },
                { likes: 7 },
              ]),
            { timeoutMs: CONVERGE_MS, message: `${dc.name} sees the likes` },
          );
        for (const page of [SOLO, BOTH])
          expect((await publisher(dc1).remove(page, "likes")).status).toBe(200);
        for (const dc of multi.dcs)
          await eventually(
            async () =>
              expect((await publisher(dc).totals(SOLO, BOTH)).map((t) => t.counters)).toEqual([
                { shares: 2 },
                {},
              ]),
            { timeoutMs: CONVERGE_MS, message: `${dc.name} hides the deleted counters` },
          );
        for (const dc of multi.dcs)
          await eventually(
            async () =>
              expect(await storedCounters(redis.get(dc.name)!, SOLO)).toEqual([
                "@del:likes",
                "likes",
                "shares",
              ]),
            {
              timeoutMs: CONVERGE_MS,
              message: `${dc.name} stores the tombstone`,
            },
          );

        // --- dc1 purges while cut off from dc2 ------------------------------------------------------------
        multi.cut();
        const purge = await admin(dc1).request<PurgeBody>("POST", "/v1/admin/purge", {
          body: { older_than_s: 0 },
        });
        expect(purge.status).toBe(200);
        expect(purge.body).toMatchObject({ dc: "dc1", pages: 1, counters: 1, kept: 1, failed: 0 });
        expect(purge.body.nodes.map((n) => n.error)).toEqual([undefined, undefined]);
        expect(await storedCounters(redis.get("dc1")!, SOLO)).toEqual(["shares"]);
        expect(await storedCounters(redis.get("dc1")!, BOTH)).toEqual(["@del:likes", "likes"]);
        expect(await storedCounters(redis.get("dc2")!, SOLO)).toEqual(["@del:likes", "likes", "shares"]);
        const consoleView = await admin(dc1).request<{ counters: Array<{ name: string }> }>(
          "GET",
          `/v1/admin/pages/${encodeURIComponent(SOLO)}`,
        );
        expect(consoleView.body.counters.map((c) => c.name)).toEqual(["shares"]);

        // --- healed: dc2 hears the purge, and its copy does not come back into dc1 -----------------------------
        multi.heal();
        await multi.waitLinked();
        for (const dc of multi.dcs)
          await eventually(
            async () => expect(await storedCounters(redis.get(dc.name)!, SOLO)).toEqual(["shares"]),
            {
              timeoutMs: CONVERGE_MS,
              message: `${dc.name} holds nothing of the purged counter`,
            },
          );
        const digests = async (dc: TestDc): Promise<string[]> => {
          const r = redis.get(dc.name)!;
          const keys = (await r.keys("lc:digest:*")).sort();
          return Promise.all(keys.map(async (k) => `${k}=${await r.hget(k, "all")}`));
        };
        await eventually(async () => expect(await digests(dc1)).toEqual(await digests(dc2)), {
          timeoutMs: CONVERGE_MS,
          message: "both DCs hold the same entries",
        });
        // The counter that had to stay is still hidden in both.
        for (const dc of multi.dcs) {
          expect(await storedCounters(redis.get(dc.name)!, BOTH)).toEqual(["@del:likes", "likes"]);
          expect((await publisher(dc).totals(BOTH))[0]!.counters).toEqual({});
        }

        // --- likes after the purge count exactly once, in both DCs ------------------------------------------
        expect((await publisher(dc2).change(SOLO, "likes", 1, "after-1")).status).toBe(200);
        expect((await publisher(dc1).change(SOLO, "likes", 2, "after-2")).status).toBe(200);
        for (const dc of multi.dcs)
          await eventually(
            async () =>
              expect((await publisher(dc).totals(SOLO))[0]!.counters).toEqual({ likes: 3, shares: 2 }),
            {
              timeoutMs: CONVERGE_MS,
              message: `${dc.name} counts the likes after the purge`,
            },
          );
      },
      TEST_TIMEOUT_MS,
    );
  },
);
