/**
 * A call caught in flight when the store's connection drops is never run after the reconnect: it
 * rejects, and its caller answers "unavailable" (a publisher retries with the same key). Run late,
 * against a Redis that restarted without its last second, it would record its key on the lower
 * entry while its caller had given up on it, and the owner's own higher entry, written back, would
 * swallow it: a like acknowledged (as the retry's duplicate) and never counted.
 */
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, expect, test } from "vitest";
import { RedisStore, type IncrementOp, type Lease } from "../src/index.js";
import { RedisServer, describeWithRedis } from "../../../test/support/redis_server.js";
import { incrementOp } from "./store_contract.js";

const LEASE_MS = 60_000;
const KEY_TTL_MS = 60_000;

/** A TCP proxy to Redis that can hold what clients send (a link that stalls), and drop every connection. */
class StallingProxy {
  held = false;
  readonly #pairs = new Set<[Socket, Socket]>();
  private constructor(readonly server: Server) {}

  static async start(upstreamPort: number): Promise<StallingProxy> {
    const server = createServer();
    const proxy = new StallingProxy(server);
    server.on("connection", (client) => {
      const upstream = createConnection({ host: "127.0.0.1", port: upstreamPort });
      const pair: [Socket, Socket] = [client, upstream];
      proxy.#pairs.add(pair);
      for (const s of pair) {
        s.on("error", () => s.destroy());
        s.on("close", () => {
          proxy.#pairs.delete(pair);
          (s === client ? upstream : client).destroy();
        });
      }
      client.on("data", (chunk) => {
        if (!proxy.held) upstream.write(chunk);
      });
      upstream.on("data", (chunk) => client.write(chunk));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  get url(): string {
    const address = this.server.address();
    return `redis://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`;
  }

  dropAll(): void {
    for (const [client, upstream] of this.#pairs) {
      client.destroy();
      upstream.destroy();
    }
  }

  close(): Promise<void> {
    this.dropAll();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

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
    const proxy = await StallingProxy.start(redis.port);
    const store = await RedisStore.connect({ url: proxy.url, keyPrefix: `lc:inflight${process.pid}:` });
    try {
      const fence = (await store.acquire(0, "node-a", LEASE_MS))!;
      expect(fence).toBeDefined();
      // Sent, never delivered: the link stalls, then every connection through it drops.
      proxy.held = true;
      const inFlight = store.increment([op(fence, "k1")], KEY_TTL_MS);
      const settled = inFlight.then(
        () => "resolved",
        () => "rejected",
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
      proxy.held = false;
      const droppedAt = performance.now();
      proxy.dropAll();
      expect(await settled).toBe("rejected");
      // At the drop, not at the call's timeout (5 s): its caller answers at once, and what waits
      // behind it (the next flush) goes on.
      expect(performance.now() - droppedAt).toBeLessThan(1_000);
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
});
