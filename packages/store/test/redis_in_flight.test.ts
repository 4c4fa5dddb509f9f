/**
 * A call caught in flight when the store's connection drops is never run after the reconnect: it
 * rejects, and its caller answers "unavailable" (a publisher retries with the same key). Run late,
 * against a Redis that restarted without its last second, it would record its key on the lower
 * entry while its caller had given up on it, and the owner's own higher entry, written back, would
 * swallow it: a like acknowledged (as the retry's duplicate) and never counted.
 */
import { afterAll, beforeAll, expect, test } from "vitest";
import { RedisStore, type IncrementOp, type Lease } from "../src/index.js";
import { LinkProxy } from "../../../test/support/link_proxy.js";
import { RedisServer, describeWithRedis } from "../../../test/support/redis_server.js";
import { incrementOp } from "./contract_stores.js";

const LEASE_MS = 60_000;
const KEY_TTL_MS = 60_000;

function op(fence: Lease, key: string): IncrementOp {
  return incrementOp(fence, { key, payload: `ack-${key}` });
}

describeWithRedis("redis store - calls in flight", () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await RedisServer.start();
  });
  afterAll(() => redis.stop());

  test("redis store - a call in flight when the connection drops rejects at once, and is not run after the reconnect", async () => {
    const proxy = await LinkProxy.start({ targetPort: redis.port });
    const url = `redis://127.0.0.1:${proxy.port}`;
    const store = await RedisStore.connect({ url, keyPrefix: `lc:inflight${process.pid}:` });
    try {
      const fence = (await store.acquire(0, "node-a", LEASE_MS))!;
      expect(fence).toBeDefined();
      // Sent, never delivered: the link stalls, then every connection through it drops.
      proxy.mute();
      const inFlight = store.increment([op(fence, "k1")], KEY_TTL_MS);
      const settled = inFlight.then(
        () => "resolved",
        () => "rejected",
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
      const droppedAt = performance.now();
      proxy.cut();
      proxy.heal();
      expect(await settled).toBe("rejected");
      // At the drop, not at the call's timeout (5 s): its caller answers at once, and what waits
      // behind it (the next flush) goes on.
      expect(performance.now() - droppedAt).toBeLessThan(4_000);
      // Reconnected: the key was never recorded, so the retry applies (once).
      let retry: Awaited<typeof inFlight> | undefined;
      const deadline = Date.now() + 10_000;
      while (retry === undefined) {
        try {
          retry = await store.increment([op(fence, "k1")], KEY_TTL_MS);
        } catch (err) {
          if (Date.now() > deadline) throw err;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      }
      expect(retry).toMatchObject([{ kind: "applied", entry: { p: 1, n: 0 } }]);
    } finally {
      await store.close();
      await proxy.close();
    }
  });
  test("redis store - after a dropped connection to a healthy server, changes waiting for a replica go on once it is back", async () => {
    const replica = await RedisServer.start({ extraArgs: ["--replicaof", "127.0.0.1", String(redis.port)] });
    const proxy = await LinkProxy.start({ targetPort: redis.port });
    const url = `redis://127.0.0.1:${proxy.port}`;
    const store = await RedisStore.connect({ url, keyPrefix: `lc:blip${process.pid}:`, waitReplicas: 1 });
    try {
      // Once the replica has synced, the lease's WAIT is confirmed.
      let fence: Lease | null | undefined;
      for (const deadline = Date.now() + 10_000; fence === undefined;) {
        fence = await store.acquire(1, "node-a", LEASE_MS).catch((err: unknown) => {
          if (Date.now() > deadline) throw err;
          return new Promise<undefined>((resolve) => setTimeout(resolve, 100));
        });
      }
      if (fence === null) throw new Error("lease not taken");
      proxy.mute();
      const inFlight = store.increment([op(fence, "b1")], KEY_TTL_MS).catch((err: unknown) => err);
      await new Promise((resolve) => setTimeout(resolve, 100));
      proxy.cut();
      proxy.heal();
      await inFlight;
      // Refused while it reconnects; never for a WAIT that came back short, since none ran.
      const refusals: string[] = [];
      for (let i = 0; ; i++) {
        const outcome = await store.increment([op(fence, `n${i}`)], KEY_TTL_MS).catch((err: Error) => err);
        if (!(outcome instanceof Error)) break;
        refusals.push(outcome.message);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(refusals.filter((message) => message.includes("came back short"))).toEqual([]);
    } finally {
      await store.close();
      await proxy.close();
      await replica.stop();
    }
  });
});
