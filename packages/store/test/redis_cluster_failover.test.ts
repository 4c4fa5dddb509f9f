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

      // Increments of one like each, under unique keys; a call that fails is retried whole, later.
      let next = 0;
      const acknowledged = new Set<string>();
      const pending: IncrementOp[][] = [];
      let failedCalls = 0;
      const errors = new Set<string>();
      const newCall = (): IncrementOp[] =>
        Array.from({ length: OPS_PER_CALL }, () => {
          const page = pages[next % PAGES]!;
          const key = `k${next++}`;
          return {
            fence: leases[partitionOf(page, PARTITIONS)]!,
            page,
            counter: "likes",
            dc: "dc1",
            delta: 1,
            key,
            payload: key,
          };
        });
      const send = async (ops: IncrementOp[]): Promise<void> => {
        try {
          const outcomes = await store.increment(ops, KEY_TTL_MS);
          outcomes.forEach((o, i) => {
            expect(["applied", "duplicate"]).toContain(o.kind);
            acknowledged.add(ops[i]!.key);
          });
        } catch (err) {
          errors.add(`${String(err)} <- ${String((err as Error).cause)}`);
          failedCalls++;
          pending.push(ops);
        }
      };
      const loadUntil = async (deadline: number, fresh: boolean): Promise<void> => {
        while (Date.now() < deadline && (fresh || pending.length > 0)) {
          const calls = pending.splice(0, 4);
          if (fresh) while (calls.length < 4) calls.push(newCall());
          await Promise.all(calls.map(send));
          if (!fresh && pending.length > 0) await sleep(50);
        }
      };

      await loadUntil(Date.now() + 1_000, true);
      const beforeKill = acknowledged.size;
      expect(beforeKill).toBeGreaterThan(0);
      await cluster.kill(doomed.port);
      // Load goes on while the cluster notices and promotes the replica.
      await loadUntil(Date.now() + 2_000, true);
      await cluster.waitForFailover(doomed.port);
      // The promoted master has no replica: once the client follows the new slot map, what it
      // writes there is not acknowledged.
      await loadUntil(Date.now() + 1_000, true);
      expect(pending.length).toBeGreaterThan(0);
      let refusal = "";
      for (const deadline = Date.now() + 10_000; Date.now() < deadline && refusal === "";) {
        const call = newCall();
        refusal = await store.increment(call, KEY_TTL_MS).then(
          (outcomes) => {
            outcomes.forEach((_, i) => acknowledged.add(call[i]!.key));
            return "";
          },
          (err: unknown) => {
            pending.push(call);
            return /not confirmed/.test(String(err)) ? String(err) : "";
          },
        );
        if (refusal === "") await sleep(100);
      }
      expect(refusal).toMatch(
        /not confirmed by [\d.:]+: (0 of 1 replicas within 1000 ms|its last WAIT came back short)/,
      );
      // Back as its replica, the killed node lets the shard acknowledge again; every retry gets in.
      await cluster.restart(doomed.port);
      await loadUntil(Date.now() + 30_000, false);
      expect(pending).toEqual([]);
      expect(failedCalls).toBeGreaterThan(0);
      expect(acknowledged.size).toBe(next);

      // Every key counted exactly once: each page holds one like per key sent to it.
      const records = await store.loadMany(pages);
      const expected = (i: number) => Math.floor(next / PAGES) + (i < next % PAGES ? 1 : 0);
      const wrong = pages.filter((_, i) => (records[i]!.likes?.dc1?.p ?? 0) !== expected(i));
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
