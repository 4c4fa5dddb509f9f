/**
 * The Redis store on a real Redis Cluster (3 masters, 3 replicas): every contract suite the other
 * stores pass, and what only a cluster shows: keys spread over every master, listings merged across
 * shards, writes that must name the page's own partition, and WAIT on replicas.
 */
import { Cluster } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import { partitionOf } from "@livecount/ring";
import { InvalidStoreInputError, RedisStore, StoreError, type Lease } from "@livecount/store";
import { RedisCluster, describeWithRedisCluster } from "../../../test/support/redis_cluster.js";
import { describeConvergenceContract } from "./convergence_contract.js";
import { describeFenceContract } from "./fence_contract.js";
import { describePurgeContract } from "./purge_contract.js";
import { describeIncrementBatchContract } from "./increment_batch_contract.js";
import { describeIncrementContract } from "./increment_contract.js";
import { describeWindowContract } from "./window_contract.js";
import { describeStoreContract } from "./store_contract.js";
import { PagePlacement } from "./page_placement.js";

/** The suites use partitions up to 14. */
const SUITE_PARTITIONS = 16;
/** The default of LIVECOUNT_PARTITIONS: what spreads over the masters in a deployment. */
const PARTITIONS = 256;
const LEASE_MS = 60_000;
const KEY_TTL_MS = 60_000;
/**
 * The listing test's calls go one after another, hundreds of them, each to every master: 3.5 s
 * alone, 22 s at nice 19 beside the timed clusters (test/run.mjs), near the 30 s default.
 */
const LISTING_TIMEOUT_MS = 120_000;

let prefixes = 0;
/** A key prefix no other test in this process uses, so tests share one cluster without interfering. */
const uniquePrefix = (): string => `lc:t${process.pid}-${++prefixes}:`;

describeWithRedisCluster("redis cluster store", () => {
  let cluster: RedisCluster;

  beforeAll(async () => {
    cluster = await RedisCluster.start();
  }, 60_000);

  afterAll(async () => {
    await cluster?.stop();
  });

  async function openPlaced(now: () => number) {
    const placement = new PagePlacement();
    const store = await RedisStore.connect({
      cluster: cluster.seeds.split(","),
      keyPrefix: uniquePrefix(),
      now,
      partitions: SUITE_PARTITIONS,
      partitionOf: placement.partitionOf,
    });
    return placement.wrap(store);
  }

  describeStoreContract("redis cluster store", openPlaced);
  describeConvergenceContract("redis cluster store", openPlaced);
  describeFenceContract("redis cluster store", openPlaced);
  describePurgeContract("redis cluster store", openPlaced);
  describeWindowContract("redis cluster store", openPlaced);
  describeIncrementBatchContract("redis cluster store", openPlaced);
  describeIncrementContract("redis cluster store", openPlaced);

  describe("redis cluster store", () => {
    const cleanups: (() => Promise<unknown>)[] = [];
    afterEach(async () => {
      await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
    });

    async function connect(
      options: { waitReplicas?: number; waitTimeoutMs?: number; keyPrefix?: string } = {},
    ) {
      const store = await RedisStore.connect({
        cluster: cluster.seeds.split(","),
        keyPrefix: uniquePrefix(),
        partitions: PARTITIONS,
        ...options,
      });
      cleanups.push(() => store.close());
      return store;
    }

    /** Leases of every partition, by partition. */
    async function leaseAll(store: RedisStore): Promise<Lease[]> {
      const leases = await Promise.all(
        Array.from({ length: PARTITIONS }, (_, p) => store.acquire(p, "node-a", LEASE_MS)),
      );
      return leases.map((l) => l!);
    }

    /** `count` page ids under a few prefixes, spread over the partitions by the ring's hash. */
    const pageIds = (count: number): string[] =>
      Array.from({ length: count }, (_, i) => `${["article", "art", "video", "b"][i % 4]}-${i * 7919}`);

    test("redis cluster store - pages written through the ring spread over every master; each partition's keys share a slot", async () => {
      const keyPrefix = uniquePrefix();
      const store = await connect({ keyPrefix });
      const leases = await leaseAll(store);
      const pages = pageIds(2_000);
      const byPartition = new Map<number, string[]>();
      for (const page of pages) {
        const p = partitionOf(page, PARTITIONS);
        byPartition.set(p, [...(byPartition.get(p) ?? []), page]);
      }
      await store.write(
        [...byPartition].map(([p, ids]) => ({
          fence: leases[p]!,
          writes: ids.map((page) => ({ page, counter: "likes", dc: "dc1", entry: { p: 3, n: 1 } })),
        })),
      );
      const counts = await cluster.keyCounts();
      expect(counts.size).toBe(3);
      for (const [port, keys] of counts)
        expect(keys, `master on port ${port}`).toBeGreaterThan(PARTITIONS / 10);

      // Every key of a partition is in the slot of its tag: list one master's keys and check each.
      const raw = new Cluster(
        cluster.seeds.split(",").map((s) => ({ host: s.split(":")[0]!, port: Number(s.split(":")[1]) })),
      );
      cleanups.push(() => raw.quit());
      const records = await store.loadMany(pages);
      expect(records.every((r) => r.likes?.dc1?.p === 3 && r.likes.dc1.n === 1)).toBe(true);
      const sample = pages.slice(0, 50);
      for (const page of sample) {
        const p = partitionOf(page, PARTITIONS);
        const [pageSlot, leaseSlot, tagSlot] = await Promise.all([
          raw.cluster("KEYSLOT", `${keyPrefix}page:{p${p}}:${page}`),
          raw.cluster("KEYSLOT", `${keyPrefix}lease:{p${p}}`),
          raw.cluster("KEYSLOT", `{p${p}}`),
        ]);
        expect([pageSlot, leaseSlot]).toEqual([tagSlot, tagSlot]);
        expect(await raw.exists(`${keyPrefix}page:{p${p}}:${page}`)).toBe(1);
      }
    });

    test(
      "redis cluster store - a listing merges every shard's pages in byte order, page by page",
      async () => {
        const store = await connect();
        const leases = await leaseAll(store);
        const pages = pageIds(1_500);
        for (let i = 0; i < pages.length; i += 100) {
          await store.increment(
            pages.slice(i, i + 100).map((page) => ({
              fence: leases[partitionOf(page, PARTITIONS)]!,
              page,
              counter: "likes",
              dc: "dc1",
              delta: 1,
              key: `k-${page}`,
              payload: "",
            })),
            KEY_TTL_MS,
          );
        }
        const sorted = (ids: string[]) => [...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
        for (const [prefix, limit] of [
          ["", 1_000],
          ["", 7],
          ["art", 64],
          ["article-", 1],
          ["video-1", 3],
        ] as const) {
          const seen: string[] = [];
          let cursor: string | undefined;
          let calls = 0;
          do {
            const list = await store.listPages(prefix, cursor, limit);
            expect(list.pages.length, `a page of ${prefix} by ${limit}`).toBe(
              list.cursor === undefined ? list.pages.length : limit,
            );
            seen.push(...list.pages);
            cursor = list.cursor;
            calls++;
          } while (cursor !== undefined && calls < 2_000);
          expect(seen, `${prefix} by ${limit}`).toEqual(sorted(pages.filter((p) => p.startsWith(prefix))));
        }
      },
      LISTING_TIMEOUT_MS,
    );

    test("redis cluster store - a write, merge or increment of a page under another partition's fence is rejected before anything applies", async () => {
      const store = await connect();
      const page = "article-1";
      const own = partitionOf(page, PARTITIONS);
      const other = (await store.acquire((own + 1) % PARTITIONS, "node-a", LEASE_MS))!;
      const entry = { p: 1, n: 0 };
      await expect(
        store.write([{ fence: other, writes: [{ page, counter: "likes", dc: "dc1", entry }] }]),
      ).rejects.toBeInstanceOf(InvalidStoreInputError);
      await expect(
        store.mergePages(other, new Map([[page, { likes: { dc2: entry } }]]), "dc1"),
      ).rejects.toBeInstanceOf(InvalidStoreInputError);
      await expect(
        store.increment(
          [{ fence: other, page, counter: "likes", dc: "dc1", delta: 1, key: "k", payload: "" }],
          KEY_TTL_MS,
        ),
      ).rejects.toBeInstanceOf(InvalidStoreInputError);
      expect(await store.load(page)).toEqual({});
    });

    test("redis cluster store - with waitReplicas a write is acknowledged once a replica has it, and fails when too few replicas exist", async () => {
      const keyPrefix = uniquePrefix();
      const confirmed = await connect({ waitReplicas: 1, keyPrefix });
      const lease = (await confirmed.acquire(3, "node-a", LEASE_MS))!;
      const page = pageIds(400).find((id) => partitionOf(id, PARTITIONS) === 3)!;
      const ops = [{ fence: lease, page, counter: "likes", dc: "dc1", delta: 2, key: "k1", payload: "" }];
      expect(await confirmed.increment(ops, KEY_TTL_MS)).toMatchObject([{ kind: "applied" }]);

      // Each master has one replica: WAIT for two cannot be met, so nothing is acknowledged.
      const unconfirmable = await connect({ waitReplicas: 2, waitTimeoutMs: 100, keyPrefix });
      const started = Date.now();
      const failed = unconfirmable.increment([{ ...ops[0]!, key: "k2" }], KEY_TTL_MS);
      await expect(failed).rejects.toThrow(/not confirmed by [\d.:]+: 1 of 2 replicas within 100 ms/);
      await expect(failed).rejects.toBeInstanceOf(StoreError);
      expect(Date.now() - started).toBeLessThan(2_000);
      // WAITs that cannot be met do not queue up: concurrent durable calls to one master wait for
      // one WAIT at most, then fail at once, and other commands to it are not held behind them.
      const stormy = await connect({ waitReplicas: 2, waitTimeoutMs: 300, keyPrefix });
      const master = (await cluster.masterOfKey("{p3}")).port;
      const sameMaster: number[] = [];
      for (let p = 0; p < PARTITIONS && sameMaster.length < 20; p++) {
        if ((await cluster.masterOfKey(`{p${p}}`)).port === master) sameMaster.push(p);
      }
      const stormStarted = Date.now();
      const storm = sameMaster.map((p) =>
        stormy.acquire(p, "node-b", LEASE_MS).then(
          () => "acquired",
          (err: unknown) => String(err),
        ),
      );
      await stormy.presenceFloor(3);
      // One WAIT (300 ms) at most ahead of it, not twenty (6 s).
      expect(Date.now() - stormStarted).toBeLessThan(1_500);
      const outcomes = await Promise.all(storm);
      expect(
        outcomes.every((o) => /not confirmed/.test(o)),
        outcomes.join("\n"),
      ).toBe(true);
      expect(Date.now() - stormStarted).toBeLessThan(1_500);
      // Reads never wait.
      expect((await unconfirmable.listPages("", undefined, 10)).pages).toEqual([page]);
      expect((await unconfirmable.load(page)).likes?.dc1?.p).toBeGreaterThanOrEqual(2);
    });
  });
});
