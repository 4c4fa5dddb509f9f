/**
 * Scaling the store out while it serves: a one-DC deployment on a Redis Cluster of three masters with
 * a replica each (LIVECOUNT_REDIS_WAIT_REPLICAS=1) gets a fourth with its replica, and `redis-cli
 * --cluster rebalance` moves a quarter of the slots to it key by key, under likes with idempotency
 * keys and viewers joining and leaving. Every page stays exact, no
 * acknowledged like is lost or counted twice, and the counter nodes, restarted, read every page back
 * from the masters that hold its slot now.
 */
import { expect, onTestFinished, test } from "vitest";
import { LikeLedger, expectExact } from "../support/audience.js";
import { finishLikes, random, seatAudience, startChurn, startCluster } from "../support/fault_scenes.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { RedisCluster, describeWithRedisCluster } from "../support/redis_cluster.js";

const CONVERGE_MS = 15_000;

if (!natsServerAvailable()) console.warn("\n!!! SKIPPED: the redis cluster tests need nats-server\n");

describeWithRedisCluster("cluster - a redis cluster scaled out", () => {
  test.skipIf(!natsServerAvailable())(
    "cluster - a master added and the slots rebalanced onto it under likes and churn: every page exact, every acknowledged like counted once",
    async () => {
      const redis = await RedisCluster.start();
      onTestFinished(() => redis.stop());
      // As infra/ deploys it: likes acknowledged once a replica holds them, leases past a failover.
      const cluster = await startCluster({
        redisCluster: redis,
        env: { LIVECOUNT_REDIS_WAIT_REPLICAS: "1", LIVECOUNT_PARTITION_LEASE_MS: "8000" },
      });
      const rnd = random("redis cluster rebalance");
      const audience = await seatAudience(cluster, "rs", 60, rnd);
      const likes = new LikeLedger(cluster, audience.pages, rnd);
      await Promise.all(audience.pages.map((page) => likes.like(page)));
      const stopLikes = finishLikes(likes.run());
      const churn = startChurn(audience);
      await likes.waitAcknowledged(20);
      await churn.waitFor(10);

      const started = Date.now();
      const added = await redis.addMaster(1);
      const rebalanceMs = Date.now() - started;
      const counts = await redis.keyCounts();
      expect(counts.get(added), `keys on the new master: ${[...counts]}`).toBeGreaterThan(0);

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
      console.info(
        `redis rebalance: ${JSON.stringify({ rebalanceMs, keysPerMaster: [...counts], likes: likes.totalKeys, retries: likes.stats.retries, unavailable, flushFailures })}`,
      );
    },
    120_000,
  );
});
