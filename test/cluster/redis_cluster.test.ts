/**
 * A one-DC deployment whose store is a real Redis Cluster (3 masters, 3 replicas) with
 * LIVECOUNT_REDIS_WAIT_REPLICAS=1: viewers and likes exact through both gateways, pages spread over
 * every master, listings across shards, and a master killed with SIGKILL under load losing no
 * acknowledged like, checked after the counter nodes restart and read every page back from Redis.
 * With one replica per master, the promoted master cannot confirm a like until its old master
 * rejoins as its replica: likes of its pages wait meanwhile, everything else goes on.
 *
 * And scaled out while it serves: a fourth master with its replica joins, and `redis-cli --cluster
 * rebalance` moves a quarter of the slots to it key by key, under likes and churn. Every page stays
 * exact, and no acknowledged like is lost or counted twice.
 */
import { expect, onTestFinished, test } from "vitest";
import type { Audience } from "../support/audience.js";
import { expectExact } from "../support/counter_reads.js";
import { LikeLedger } from "../support/like_ledger.js";
import { partitionOf } from "@livecount/ring";
import { CLUSTER_PUBLISHER_KEY, TIMINGS, type TestCluster } from "../support/cluster.js";
import { finishLikes, random, seatAudience, startChurn, startCluster } from "../support/fault_scenes.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { PublisherHttp } from "../support/publisher_http.js";
import { RedisCluster, describeWithRedisCluster } from "../support/redis_cluster.js";

/** Until every page is exact when nothing failed. */
const CONVERGE_MS = 10_000;
/** A failover takes the cluster node timeout (1 s in tests) and an election; slack for a loaded machine. */
const FAILOVER_MS = 20_000;
/**
 * How long adding a master may take, the rebalance's moves included: about 16 s alone on two cores,
 * more than 60 s at `npm test`'s nice 19 beside the timed clusters on a slow host (a CI run).
 */
const REBALANCE_TIMEOUT_MS = 150_000;

// Under CI a missing nats-server throws here (natsServerAvailable) instead of skipping.
if (!natsServerAvailable()) console.warn("\n!!! SKIPPED: the redis cluster tests need nats-server\n");

/**
 * A Redis Cluster of three masters with a replica each, and a cluster of processes on it as infra/
 * deploys one: likes acknowledged once a replica holds them, leases that outlast a failover (as the
 * default 8 s outlasts Redis's with a 5 s node timeout), so owners keep their partitions through it.
 * An audience on `pages` pages named `<prefix>-<i>`, a like on every page first (so each is in the store whatever its
 * audience), then likes running until `stopLikes`.
 */
async function onRedisCluster(label: string, prefix: string, pages: number) {
  const redis = await RedisCluster.start();
  onTestFinished(() => redis.stop());
  const cluster = await startCluster({
    redisCluster: redis,
    env: { LIVECOUNT_REDIS_WAIT_REPLICAS: "1", LIVECOUNT_PARTITION_LEASE_MS: "8000" },
  });
  const rnd = random(label);
  const audience = await seatAudience(cluster, prefix, pages, rnd);
  const likes = new LikeLedger(cluster, audience.pages, rnd);
  await Promise.all(audience.pages.map((page) => likes.like(page)));
  const stopLikes = finishLikes(likes.run());
  await likes.waitAcknowledged(20);
  return { redis, cluster, audience, likes, stopLikes };
}

/**
 * What the counter nodes hold in memory could hide a lost write: they restart, and every page is read
 * back from the masters that hold its slot now.
 */
async function expectExactFromStore(cluster: TestCluster, audience: Audience, likes: LikeLedger) {
  for (const counter of cluster.counters) await counter.kill();
  for (const counter of cluster.counters) await counter.start();
  await cluster.waitBalanced();
  await expectExact({
    cluster,
    audience,
    likes,
    timeoutMs: CONVERGE_MS,
    when: "after the counter nodes restart",
  });
}

describeWithRedisCluster("cluster - on a redis cluster", () => {
  test.skipIf(!natsServerAvailable())(
    "cluster - on a Redis Cluster with WAIT for one replica, viewers and likes stay exact and every acknowledged like survives kill -9 of a master",
    async () => {
      const { redis, cluster, audience, likes, stopLikes } = await onRedisCluster(
        "redis master kill",
        "rc",
        40,
      );
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "on the cluster" });

      // Pages are in every shard, and a listing merges them in order.
      const counts = await redis.keyCounts();
      expect(
        [...counts.values()].every((n) => n > 0),
        `keys per master: ${[...counts]}`,
      ).toBe(true);
      const http = new PublisherHttp(cluster.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
      const listed: string[] = [];
      let cursor: string | null | undefined;
      do {
        const query = `prefix=rc-&limit=7${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
        const res = await http.read(query);
        expect(res.status).toBe(200);
        listed.push(...res.body.pages.map((p) => p.page));
        cursor = res.body.cursor;
      } while (cursor);
      expect(listed).toEqual([...audience.pages].sort());

      const churn = startChurn(audience);
      await churn.waitFor(10);
      const [victim] = await redis.masters();
      const before = likes.totalAcknowledged;
      await redis.kill(victim!.port);
      await redis.waitForFailover(victim!.port, FAILOVER_MS);
      // The promoted master has no replica: likes of its pages wait (answered 503, retried), the
      // other shards' go on, and presence (not held for WAIT) stays exact everywhere.
      await churn.waitFor(20);
      await churn.stop();
      const promoted = (await redis.masterOfSlot(victim!.slots[0]![0])).port;
      const masterOf = async (page: string): Promise<number> =>
        (await redis.masterOfKey(`{p${partitionOf(page, TIMINGS.partitions)}}`)).port;
      const shards = await Promise.all(
        audience.pages.map(async (page) => [page, await masterOf(page)] as const),
      );
      const healthy = shards.find(([, port]) => port !== promoted)![0];
      const waiting = shards.find(([, port]) => port === promoted)![0];
      const started = Date.now();
      await likes.like(healthy);
      console.info(`redis master kill: a like on a healthy shard acknowledged in ${Date.now() - started} ms`);
      expect((await http.change(waiting, "likes", 1, "while-unconfirmed")).status).toBe(503);
      expect(likes.totalAcknowledged).toBeGreaterThan(before);
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "after the failover" });
      // Back as a replica, the killed node lets its shard acknowledge again.
      await redis.restart(victim!.port);
      // The refused like may have applied all the same: the publisher retries it, and it counts once.
      await likes.like(waiting, "while-unconfirmed");
      await stopLikes();
      await expectExact({
        cluster,
        audience,
        likes,
        timeoutMs: CONVERGE_MS,
        when: "with the shard whole again",
      });
      await expectExactFromStore(cluster, audience, likes);
      console.info(
        `redis master kill: ${likes.totalKeys} likes, ${likes.stats.retries} retries, every page exact from the store`,
      );
    },
    120_000,
  );
  test.skipIf(!natsServerAvailable())(
    "cluster - a master added and the slots rebalanced onto it under likes and churn: every page exact, every acknowledged like counted once",
    async () => {
      const { redis, cluster, audience, likes, stopLikes } = await onRedisCluster(
        "redis rebalance",
        "rs",
        60,
      );
      const churn = startChurn(audience);
      await churn.waitFor(10);

      const started = Date.now();
      const added = await redis.addMaster(1, REBALANCE_TIMEOUT_MS);
      const rebalanceMs = Date.now() - started;
      const keys = await redis.keyCounts();
      expect(keys.get(added), `keys on the new master: ${[...keys]}`).toBeGreaterThan(0);
      // What the moves cost: likes answered `unavailable` (retried by the publisher) and flushes that
      // failed (written again the next window), over every counter node.
      const sum = async (name: string, labels?: string): Promise<number> =>
        (await Promise.all(cluster.counters.map((c) => c.metric(name, labels)))).reduce((a, b) => a + b, 0);
      const unavailable = await sum("livecount_counter_increments_total", 'outcome="unavailable"');
      const flushFailures = await sum("livecount_counter_flush_failures_total");

      await likes.waitAcknowledged(20);
      await churn.waitFor(10);
      await churn.stop();
      await stopLikes();
      await expectExact({ cluster, audience, likes, timeoutMs: CONVERGE_MS, when: "after the rebalance" });
      await expectExactFromStore(cluster, audience, likes);
      const report = {
        rebalanceMs,
        keysPerMaster: [...keys],
        likes: likes.totalKeys,
        retries: likes.stats.retries,
      };
      console.info(`redis rebalance: ${JSON.stringify({ ...report, unavailable, flushFailures })}`);
    },
    REBALANCE_TIMEOUT_MS + 60_000,
  );
});
