/**
 * A Redis Cluster master killed (SIGKILL) under load, with `waitReplicas: 1`: every increment the
 * store acknowledged is still counted after its replica takes over, every one it did not is applied
 * exactly once by the caller's retry under the same key, the promoted master acknowledges nothing
 * until it has a replica again, and fencing holds across the failover (an epoch handed out before
 * it is never handed out again).
 */
import { afterAll, beforeAll, expect, test } from "vitest";
import { partitionOf } from "@livecount/ring";
import { RedisStore, type IncrementOp, type Lease } from "@livecount/store";
import { RedisCluster, describeWithRedisCluster } from "../../../test/support/redis_cluster.js";

const PARTITIONS = 64;
const PAGES = 300;
const OPS_PER_CALL = 25;
const KEY_TTL_MS = 600_000;
const LONG_LEASE_MS = 600_000;
const SHORT_LEASE_MS = 5_000;
const START_MS = 1_700_000_000_000;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describeWithRedisCluster("redis cluster store failover", () => {
  let cluster: RedisCluster;

  beforeAll(async () => {
    cluster = await RedisCluster.start();
  }, 60_000);

  afterAll(async () => {
    await cluster?.stop();
  });

  test("redis cluster store - with waitReplicas 1 every acknowledged like survives kill -9 of a master, and no epoch is handed out twice", async () => {
    let nowMs = START_MS;
    const connect = () =>
      RedisStore.connect({
        cluster: cluster.seeds.split(","),
        partitions: PARTITIONS,
        waitReplicas: 1,
        // A call caught by the kill (queued for the dead master) gives up sooner than the default.
        commandTimeoutMs: 2_000,
        now: () => nowMs,
      });
    const store = await connect();
    const other = await connect();
    try {
      const pages = Array.from({ length: PAGES }, (_, i) => `page-${i}`);
      const leases: Lease[] = [];
      for (let p = 0; p < PARTITIONS; p++) leases.push((await store.acquire(p, "node-a", LONG_LEASE_MS))!);
      // The partition whose master dies, and a short lease on it that must survive the failover.
      const doomedPartition = partitionOf(pages[0]!, PARTITIONS);
      const doomed = await cluster.masterOfKey(`{p${doomedPartition}}`);
      await store.release(leases[doomedPartition]!);
      const shortLease = (await store.acquire(doomedPartition, "node-a", SHORT_LEASE_MS))!;
      leases[doomedPartition] = { ...shortLease, expiresAt: START_MS + LONG_LEASE_MS };

      // Increments of one like each, under unique keys. An op answered "unavailable" (its shard
      // failed while the others answered) and every op of a call that failed whole are retried,
      // under the same key, later.
      let next = 0;
      const sent = new Map<string, number>();
      const acknowledged = new Set<string>();
      const pending: IncrementOp[] = [];
      let unavailable = 0;
      let lastCallError: unknown;
      const like = (page: string): IncrementOp => {
        const key = `k${next++}`;
        sent.set(page, (sent.get(page) ?? 0) + 1);
        const fence = leases[partitionOf(page, PARTITIONS)]!;
        return { fence, page, counter: "likes", dc: "dc1", delta: 1, key, payload: key };
      };
      const newCall = (): IncrementOp[] =>
        Array.from({ length: OPS_PER_CALL }, () => like(pages[next % PAGES]!));
      /** Sends a call; resolves with the error when it failed whole. */
      const send = async (ops: IncrementOp[]): Promise<unknown> => {
        try {
          const outcomes = await store.increment(ops, KEY_TTL_MS);
          outcomes.forEach((o, i) => {
            expect(["applied", "duplicate", "unavailable"]).toContain(o.kind);
            if (o.kind === "unavailable") {
              unavailable++;
              pending.push(ops[i]!);
            } else acknowledged.add(ops[i]!.key);
          });
          return undefined;
        } catch (err) {
          unavailable += ops.length;
          pending.push(...ops);
          lastCallError = err;
          return err;
        }
      };
      const loadUntil = async (deadline: number, fresh: boolean): Promise<void> => {
        while (Date.now() < deadline && (fresh || pending.length > 0)) {
          // With fresh load, one call of new likes every round: retries of a shard that cannot
          // confirm (all of them failing at once) must not crowd out the healthy shards' likes.
          const calls: IncrementOp[][] = fresh ? [newCall()] : [];
          while (pending.length > 0 && calls.length < 4) calls.push(pending.splice(0, OPS_PER_CALL));
          if (fresh) while (calls.length < 4) calls.push(newCall());
          await Promise.all(calls.map(send));
          if (pending.length > 0) await sleep(fresh ? 10 : 50);
        }
      };

      await loadUntil(Date.now() + 1_000, true);
      const beforeKill = acknowledged.size;
      expect(beforeKill).toBeGreaterThan(0);
      await cluster.kill(doomed.port);
      // Load goes on while the cluster notices and promotes the replica.
      await loadUntil(Date.now() + 2_000, true);
      await cluster.waitForFailover(doomed.port);
      // The promoted master has no replica: once the client follows the new slot map, a like on
      // its shard is not acknowledged, while the other shards' are.
      const ackedAtFailover = acknowledged.size;
      // Each call waits up to the WAIT timeout on the shard without a replica, and the client
      // follows the new slot map only after a refresh: the load goes on until the other shards
      // acknowledge (up to 30 s).
      const failoverAt = Date.now();
      while (acknowledged.size === ackedAtFailover && Date.now() - failoverAt < 30_000)
        await loadUntil(Date.now() + 1_000, true);
      expect(
        acknowledged.size,
        `no like acknowledged ${Date.now() - failoverAt} ms after the failover; last call error: ${String(lastCallError)}; masters: ${JSON.stringify(await cluster.masters().catch((e: unknown) => String(e)))}`,
      ).toBeGreaterThan(ackedAtFailover);
      let refusal = "";
      for (const deadline = Date.now() + 20_000; Date.now() < deadline && refusal === "";) {
        const err = await send([like(pages[0]!)]);
        refusal = /not confirmed/.test(String(err)) ? String(err) : "";
        if (refusal === "") await sleep(100);
      }
      expect(refusal).toMatch(
        /not confirmed by [\d.:]+: (0 of 1 replicas within 1000 ms|its last WAIT came back short)/,
      );
      // Back as its replica, the killed node lets the shard acknowledge again; every retry gets in.
      await cluster.restart(doomed.port);
      await loadUntil(Date.now() + 30_000, false);
      expect(pending).toEqual([]);
      expect(unavailable).toBeGreaterThan(0);
      expect(acknowledged.size).toBe(next);

      // Every key counted exactly once: each page holds one like per key sent to it.
      const records = await store.loadMany(pages);
      const wrong = pages.filter((page, i) => (records[i]!.likes?.dc1?.p ?? 0) !== (sent.get(page) ?? 0));
      expect(wrong, `${next} likes over ${PAGES} pages`).toEqual([]);

      // The short lease was acknowledged before the kill, so the promoted replica holds it: nobody
      // else takes the partition while it lives, and the next epoch is a new one.
      expect(await other.acquire(doomedPartition, "node-b", SHORT_LEASE_MS)).toBeNull();
      nowMs += SHORT_LEASE_MS;
      const taken = (await other.acquire(doomedPartition, "node-b", SHORT_LEASE_MS))!;
      expect(taken.epoch).toBeGreaterThan(shortLease.epoch);
      const stale = await store.increment(
        [
          {
            fence: shortLease,
            page: pages[0]!,
            counter: "likes",
            dc: "dc1",
            delta: 1,
            key: "late",
            payload: "",
          },
        ],
        KEY_TTL_MS,
      );
      expect(stale).toEqual([{ kind: "stale" }]);
    } finally {
      await Promise.all([store.close(), other.close()]);
    }
  }, 90_000);
});
