/**
 * Store.onReconnect on a Redis Cluster: a master that restarted (it may have lost its last writes)
 * is told, each node's connection on its own, or nothing is written back (RecentKeys.restoreAll,
 * ActorRegistry.rewriteOwn); connections that merely dropped are not.
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

  test("redis cluster store - onReconnect runs when a master restarted, not when its connections merely dropped", async () => {
    const store = await RedisStore.connect({ cluster: cluster.seeds.split(","), partitions: 16 });
    try {
      let reconnects = 0;
      store.onReconnect?.(() => reconnects++);
      for (let p = 0; p < 16; p++) expect(await store.acquire(p, "node-a", 60_000)).toBeDefined();
      // Every master drops every client connection: the same servers, nothing lost.
      for (const { port } of await cluster.masters()) {
        const admin = new Redis({ host: "127.0.0.1", port, lazyConnect: true });
        await admin.connect();
        await admin.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes");
        admin.disconnect();
      }
      await everyPartitionAnswers(store);
      await sleep(500);
      expect(reconnects).toBe(0);
      // One master restarts.
      const [master] = await cluster.masters();
      await cluster.kill(master!.port);
      await cluster.restart(master!.port);
      await everyPartitionAnswers(store);
      const deadline = Date.now() + 10_000;
      while (reconnects === 0 && Date.now() < deadline) await sleep(50);
      expect(reconnects).toBeGreaterThan(0);
    } finally {
      await store.close();
    }
  }, 60_000);
});

/** Calls fail until the client has dialled again; resolves once every partition answers. */
async function everyPartitionAnswers(store: RedisStore): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (let p = 0; p < 16 && Date.now() < deadline;) {
    try {
      await store.nonZeroEntries(p);
      p++;
    } catch {
      await sleep(50);
    }
  }
}
