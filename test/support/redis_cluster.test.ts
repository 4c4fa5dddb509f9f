/**
 * The Redis Cluster helper the store's cluster suites stand on: keys written through one ioredis
 * `Cluster` client land on every master, and after a master crashes its promoted replica serves
 * them to the same client.
 */
import { Cluster } from "ioredis";
import { expect, onTestFinished, test } from "vitest";
import { describeWithRedisCluster, RedisCluster } from "./redis_cluster.js";

const KEYS = 300;
const TEST_TIMEOUT_MS = 90_000;

describeWithRedisCluster("support - redis cluster", () => {
  test(
    "support - a 3+3 cluster spreads 300 keys over every master and serves all of them after one master is killed",
    async () => {
      const startedAt = Date.now();
      const redis = await RedisCluster.start();
      onTestFinished(() => redis.stop());
      const startMs = Date.now() - startedAt;
      const client = new Cluster(redis.nodes);
      onTestFinished(() => void client.disconnect());

      const keys = Array.from({ length: KEYS }, (_, i) => `key-${i}`);
      await Promise.all(keys.map((key) => client.set(key, `value of ${key}`)));
      // Replication is asynchronous: each master waits for its replica to acknowledge the writes.
      const acks = await Promise.all(client.nodes("master").map((node) => node.call("WAIT", "1", "10000")));
      expect(acks).toEqual([1, 1, 1]);

      const counts = await redis.keyCounts();
      expect(counts.size).toBe(3);
      for (const count of counts.values()) expect(count).toBeGreaterThan(0);
      expect([...counts.values()].reduce((a, b) => a + b)).toBe(KEYS);

      const victim = await redis.masterOfKey(keys[0]!);
      const killedAt = Date.now();
      await redis.kill(victim.port);
      await redis.waitForFailover(victim.port);
      const failoverMs = Date.now() - killedAt;

      const readAt = Date.now();
      const values = await Promise.all(keys.map((key) => client.get(key)));
      const readMs = Date.now() - readAt;
      expect(values).toEqual(keys.map((key) => `value of ${key}`));
      const after = await redis.keyCounts();
      expect(after.has(victim.port)).toBe(false);
      expect([...after.values()].reduce((a, b) => a + b)).toBe(KEYS);
      console.info(`redis cluster: ${JSON.stringify({ startMs, failoverMs, readMs })}`);
    },
    TEST_TIMEOUT_MS,
  );
});
