/**
 * Review: Store.onReconnect on a Redis Cluster. Every master drops every client connection (what a
 * restart of each does to the node's connections); the cluster client dials them again, and the
 * store must say so, or nothing is written back (RecentKeys.restoreAll, ActorRegistry.rewriteOwn).
 */
import { Redis } from "ioredis";
import { afterAll, beforeAll, expect, test } from "vitest";
import { RedisStore } from "@livecount/store";
import { RedisCluster, describeWithRedisCluster } from "../../../test/support/redis_cluster.js";

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describeWithRedisCluster("redis cluster store reconnect", () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await RedisCluster.start({ replicasPerMaster: 0 });
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  test("redis cluster store - onReconnect runs once every master's connection came back after dropping", async () => {
    const store = await RedisStore.connect({ cluster: cluster.seeds.split(","), partitions: 16 });
    try {
      let reconnects = 0;
      store.onReconnect?.(() => reconnects++);
      for (let p = 0; p < 16; p++) expect(await store.acquire(p, "node-a", 60_000)).toBeDefined();
      for (const { port } of await cluster.masters()) {
        const admin = new Redis({ host: "127.0.0.1", port, lazyConnect: true });
        await admin.connect();
        await admin.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes");
        admin.disconnect();
      }
      // Calls fail until the client has dialled again; then every partition answers.
      const deadline = Date.now() + 10_000;
      for (let p = 0; p < 16 && Date.now() < deadline;) {
        try {
          await store.nonZeroEntries(p);
          p++;
        } catch {
          await sleep(50);
        }
      }
      await sleep(500);
      expect(reconnects).toBeGreaterThan(0);
    } finally {
      await store.close();
    }
  }, 30_000);
});
