import { createConnection, createServer, type Server, type Socket } from "node:net";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import {
  RedisStore,
  StoreError,
  ZERO_DIGEST,
  entryHash,
  xorDigest,
  type IncrementOp,
  type Lease,
} from "@livecount/store";
import { RedisServer, describeWithRedis } from "../../../test/support/redis_server.js";
import { describeConvergenceContract } from "./convergence_contract.js";
import { describeFenceContract } from "./fence_contract.js";
import { describePurgeContract } from "./purge_contract.js";
import { describeIncrementBatchContract } from "./increment_batch_contract.js";
import { describeIncrementContract } from "./increment_contract.js";
import { describeWindowContract } from "./window_contract.js";
import { incrementOp } from "./contract_stores.js";
import { describeStoreContract } from "./store_contract.js";

const LEASE_MS = 60_000;
const KEY_TTL_MS = 60_000;

let prefixes = 0;
/** A key prefix no other test in this process uses, so tests share one server without interfering. */
const uniquePrefix = (): string => `lc:t${process.pid}-${++prefixes}:`;

/** The contract's increment of p1's likes, under `key`, its payload naming the key. */
function op(fence: Lease, key: string, overrides: Partial<IncrementOp> = {}): IncrementOp {
  return incrementOp(fence, { key, payload: `ack-${key}`, ...overrides });
}

/** Retries `fn` until it resolves: the client reconnects with backoff after a server restart. */
async function eventually<T>(fn: () => Promise<T>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

/**
 * A TCP proxy that records the direction of every chunk. A call made one round trip when all the
 * bytes it sent went out before any reply came back: one run of client chunks, then replies.
 */
class TrafficRecorder {
  readonly log: ("request" | "reply")[] = [];
  readonly #sockets = new Set<Socket>();
  private constructor(readonly server: Server) {}

  static async start(upstreamPort: number): Promise<TrafficRecorder> {
    const server = createServer();
    const recorder = new TrafficRecorder(server);
    server.on("connection", (client) => {
      const upstream = createConnection({ host: "127.0.0.1", port: upstreamPort });
      for (const s of [client, upstream]) {
        recorder.#sockets.add(s);
        s.on("error", () => s.destroy());
        s.on("close", () => (s === client ? upstream : client).destroy());
      }
      client.on("data", (chunk) => {
        recorder.log.push("request");
        upstream.write(chunk);
      });
      upstream.on("data", (chunk) => {
        recorder.log.push("reply");
        client.write(chunk);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return recorder;
  }

  get url(): string {
    const address = this.server.address();
    return `redis://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`;
  }

  /** Round trips `fn` made: the number of request runs, each followed by replies. */
  async roundTrips(fn: () => Promise<unknown>): Promise<number> {
    this.log.length = 0;
    await fn();
    return this.log.filter((dir, i) => dir === "request" && this.log[i - 1] !== "request").length;
  }

  async stop(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

describeWithRedis("redis store", () => {
  let server: RedisServer;

  beforeAll(async () => {
    server = await RedisServer.start();
  });

  afterAll(async () => {
    await server?.stop();
  });

  describeStoreContract("redis store", (now) =>
    RedisStore.connect({ url: server.url, keyPrefix: uniquePrefix(), now }),
  );
  describeConvergenceContract("redis store", (now) =>
    RedisStore.connect({ url: server.url, keyPrefix: uniquePrefix(), now }),
  );
  describeFenceContract("redis store", (now) =>
    RedisStore.connect({ url: server.url, keyPrefix: uniquePrefix(), now }),
  );
  describePurgeContract("redis store", (now) =>
    RedisStore.connect({ url: server.url, keyPrefix: uniquePrefix(), now }),
  );
  describeWindowContract("redis store", (now) =>
    RedisStore.connect({ url: server.url, keyPrefix: uniquePrefix(), now }),
  );
  describeIncrementBatchContract("redis store", (now) =>
    RedisStore.connect({ url: server.url, keyPrefix: uniquePrefix(), now }),
  );
  describeIncrementContract("redis store", (now) =>
    RedisStore.connect({ url: server.url, keyPrefix: uniquePrefix(), now }),
  );

  describe("redis store", () => {
    /** Cleanups of what a test opened, run after it whatever its outcome. */
    const cleanups: (() => Promise<unknown>)[] = [];
    afterEach(async () => {
      await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()));
    });

    async function connect(url = server.url, keyPrefix = uniquePrefix()): Promise<RedisStore> {
      const store = await RedisStore.connect({ url, keyPrefix });
      cleanups.push(() => store.close());
      return store;
    }

    test("redis store - tombstones a page held from an earlier release join the tombstone digest when the page gets its first new one", async () => {
      const prefix = uniquePrefix();
      const store = await connect(server.url, prefix);
      const fence = (await store.acquire(0, "node-a", LEASE_MS))!;
      // What an earlier release left: a deleted counter and its tombstone, in no index.
      const raw = new Redis(server.url);
      cleanups.push(() => raw.quit());
      await raw.hset(
        `${prefix}page:p1`,
        ...["old\u0000dc2", "3:3", "@del:old\u0000dc2", "6:0", "@del:likes\u0000dc1", "2:0"],
      );
      expect(await store.tombDigests([0])).toEqual([ZERO_DIGEST]);
      // A delete today (the second of likes): the page enters the index, and both tombstones count,
      // each at its value now.
      await store.increment(
        [op(fence, "k1", { counter: "likes", delta: 0, also: [{ counter: "@del:likes", delta: 2 }] })],
        KEY_TTL_MS,
      );
      const expected = xorDigest(
        entryHash("p1", "@del:old", "dc2", { p: 6, n: 0 }),
        entryHash("p1", "@del:likes", "dc1", { p: 4, n: 0 }),
      );
      expect(await store.tombDigests([0])).toEqual([expected]);
    });

    test("redis store - leases keep the Redis server's time, not each process's wall clock; fences need no clock", async () => {
      // Three processes of one DC: one's wall clock 5 minutes ahead, one's 5 minutes behind, one on time.
      const realNow = Date.now.bind(Date);
      const prefix = uniquePrefix();
      let ahead: RedisStore, behind: RedisStore;
      try {
        Date.now = () => realNow() + 300_000;
        ahead = await connect(server.url, prefix);
        Date.now = () => realNow() - 300_000;
        behind = await connect(server.url, prefix);
      } finally {
        Date.now = realNow;
      }
      const onTime = await connect(server.url, prefix);

      // Ahead: its lease runs out after its 3 s for everyone, not 5 minutes on. (3 s, not 1: the
      // second acquire must come within it also when a loaded host stalls this process.)
      const SHORT_MS = 3000;
      const askedAt = realNow();
      const short = (await ahead.acquire(0, "node-ahead", SHORT_MS))!;
      expect(short.expiresAt).toBeGreaterThanOrEqual(askedAt + SHORT_MS - 50);
      expect(short.expiresAt).toBeLessThanOrEqual(realNow() + SHORT_MS + 50);
      expect(await onTime.acquire(0, "node-on-time", LEASE_MS)).toBeNull();
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, short.expiresAt + 100 - realNow())));
      expect((await onTime.acquire(0, "node-on-time", LEASE_MS))!.epoch).toBe(2);

      // Behind: its live lease is not taken from it, as if it had run out 5 minutes ago.
      await behind.acquire(1, "node-behind", LEASE_MS);
      expect(await onTime.acquire(1, "node-on-time", LEASE_MS)).toBeNull();

      // Fences need no clock: the one ahead writes under its live lease, the one behind under its
      // own, and only a takeover's new epoch stales a fence.
      const write = { page: "p1", counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } };
      const live = (await ahead.acquire(2, "node-ahead", LEASE_MS))!;
      expect(await ahead.write([{ fence: live, writes: [write] }])).toEqual([]);
      expect(await behind.write([{ fence: short, writes: [write] }])).toEqual([short]);
    });

    test("redis store - an epoch handed out again after Redis lost its last writes fences only its new holder", async () => {
      const prefix = uniquePrefix();
      const store = await connect(server.url, prefix);
      const raw = new Redis(server.url);
      cleanups.push(() => raw.quit());
      const first = (await store.acquire(0, "node-a/1", LEASE_MS))!;
      // Redis restarted from an append file written before that take (appendfsync everysec): the
      // lease and the epoch bump are gone, and node-a still holds its fence.
      await raw.del(`${prefix}lease:0`);
      await raw.decr(`${prefix}epoch:0`);
      const second = (await store.acquire(0, "node-b/1", LEASE_MS))!;
      expect(second.epoch).toBe(first.epoch);
      const write = (page: string) => ({ page, counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } });
      expect(await store.write([{ fence: first, writes: [write("p1")] }])).toEqual([first]);
      expect(await store.increment([op(first, "k1")], KEY_TTL_MS)).toEqual([{ kind: "stale" }]);
      expect(await store.renew([first], LEASE_MS)).toEqual([]);
      expect(await store.write([{ fence: second, writes: [write("p2")] }])).toEqual([]);
      expect(await store.load("p1")).toEqual({});
      expect(await store.load("p2")).toEqual({ likes: { dc1: { p: 1, n: 0 } } });
    });

    test("redis store - every call is one round trip, however many groups or ops it carries", async () => {
      const recorder = await TrafficRecorder.start(server.port);
      cleanups.push(() => recorder.stop());
      const store = await connect(recorder.url);
      const leases: Lease[] = [];
      for (const partition of [0, 1, 2]) {
        expect(
          await recorder.roundTrips(async () =>
            leases.push((await store.acquire(partition, "node-a", LEASE_MS))!),
          ),
        ).toBe(1);
      }
      const groups = leases.map((fence, i) => ({
        fence,
        writes: [
          { page: `p${i}`, counter: "viewers", dc: "dc1", entry: { p: 3, n: 1 } },
          { page: `p${i}`, counter: "likes", dc: "dc1", entry: { p: 2, n: 0 } },
        ],
      }));
      const ops = leases.map((fence, i) => op(fence, `k${i}`, { page: `p${i}` }));

      expect(await recorder.roundTrips(() => store.renew(leases, LEASE_MS))).toBe(1);
      expect(await recorder.roundTrips(() => store.write(groups))).toBe(1);
      expect(await recorder.roundTrips(() => store.increment(ops, KEY_TTL_MS))).toBe(1);
      expect(await recorder.roundTrips(() => store.increment(ops, KEY_TTL_MS))).toBe(1);
      expect(await recorder.roundTrips(() => store.load("p0"))).toBe(1);
      expect(await recorder.roundTrips(() => store.listPages("p", undefined, 2))).toBe(1);
      expect(await recorder.roundTrips(() => store.release(leases[0]!))).toBe(1);
      // The recorder does see sequential requests as separate round trips.
      expect(await recorder.roundTrips(async () => [await store.load("p0"), await store.load("p1")])).toBe(2);
      expect(await store.load("p1")).toEqual({
        viewers: { dc1: { p: 3, n: 1 } },
        likes: { dc1: { p: 3, n: 0 } },
      });
    });

    test("redis store - Redis itself drops idempotency keys after keyTtlMs", async () => {
      const keyPrefix = uniquePrefix();
      const store = await connect(server.url, keyPrefix);
      const fence = (await store.acquire(0, "node-a", LEASE_MS))!;
      const admin = new Redis(server.url);
      cleanups.push(() => admin.quit());
      await store.increment([op(fence, "k1"), op(fence, "k2")], 200);
      expect(await admin.keys(`${keyPrefix}idem:*`)).toHaveLength(2);
      await eventually(async () => expect(await admin.keys(`${keyPrefix}idem:*`)).toEqual([]), 5_000);
    });

    test("redis store - a call that fails part way records no idempotency key, so its retry applies once", async () => {
      const keyPrefix = uniquePrefix();
      const store = await connect(server.url, keyPrefix);
      const fence = (await store.acquire(0, "node-a", LEASE_MS))!;
      const admin = new Redis(server.url);
      cleanups.push(() => admin.quit());
      // An entry nobody can read, met by the call's third op after two good ones.
      await admin.hset(`${keyPrefix}page:p1`, "shares\u0000dc1", "garbage");
      const ops = [
        op(fence, "k1", { delta: 5 }),
        op(fence, "k2", { delta: 3 }),
        op(fence, "k3", { counter: "shares" }),
      ];
      await expect(store.increment(ops, KEY_TTL_MS)).rejects.toBeInstanceOf(StoreError);
      expect(await admin.keys(`${keyPrefix}idem:*`)).toEqual([]);
      expect(await admin.hget(`${keyPrefix}page:p1`, "likes\u0000dc1")).toBeNull();

      await admin.hdel(`${keyPrefix}page:p1`, "shares\u0000dc1");
      const retried = await store.increment(ops, KEY_TTL_MS);
      expect(retried.map((o) => o.kind)).toEqual(["applied", "applied", "applied"]);
      expect((await store.increment(ops, KEY_TTL_MS)).map((o) => o.kind)).toEqual([
        "duplicate",
        "duplicate",
        "duplicate",
      ]);
      expect((await store.load("p1"))?.likes).toEqual({ dc1: { p: 8, n: 0 } });
    });

    test("redis store - a key used twice in one call applies once: the second use is its duplicate", async () => {
      const store = await connect();
      const fence = (await store.acquire(0, "node-a", LEASE_MS))!;
      const outcomes = await store.increment(
        [op(fence, "k1", { delta: 2 }), op(fence, "k1", { delta: 2 }), op(fence, "k1", { delta: 7 })],
        KEY_TTL_MS,
      );
      expect(outcomes.map((o) => o.kind)).toEqual(["applied", "duplicate", "conflict"]);
      expect((await store.load("p1"))?.likes).toEqual({ dc1: { p: 2, n: 0 } });
    });

    test("redis store - connect rejects with a StoreError when Redis is unreachable", async () => {
      const scratch = await RedisServer.start();
      const url = scratch.url;
      await scratch.stop();
      await expect(RedisStore.connect({ url })).rejects.toBeInstanceOf(StoreError);
    });

    test("redis store - calls reject while Redis is down and succeed once it is back", async () => {
      const scratch = await RedisServer.start();
      const errors: Error[] = [];
      const store = await RedisStore.connect({ url: scratch.url, onError: (err) => errors.push(err) });
      cleanups.push(
        () => store.close(),
        () => scratch.stop(),
      );
      await scratch.kill();
      await expect(store.load("p1")).rejects.toBeInstanceOf(StoreError);
      await expect(store.acquire(0, "node-a", LEASE_MS)).rejects.toBeInstanceOf(StoreError);
      // Failed reconnects reach onError instead of crashing the process.
      await eventually(async () => expect(errors.length).toBeGreaterThan(0));
      await scratch.restart();
      expect(await eventually(() => store.acquire(0, "node-a", LEASE_MS))).toMatchObject({ epoch: 1 });
    });
  });

  describe("redis store durability", () => {
    let durable: RedisServer;

    beforeAll(async () => {
      durable = await RedisServer.start({ appendonly: true, appendfsync: "always" });
    });

    afterAll(async () => {
      await durable?.stop();
    });

    test("redis store - onReconnect runs after the server restarted, not after its connection merely dropped", async () => {
      const store = await RedisStore.connect({ url: durable.url, keyPrefix: uniquePrefix() });
      const raw = new Redis(durable.url);
      try {
        let reconnects = 0;
        store.onReconnect(() => reconnects++);
        await raw.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes");
        await eventually(() => store.load("p1"));
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect(reconnects).toBe(0);
        await durable.kill();
        await durable.restart();
        await eventually(() => store.load("p1"));
        await eventually(async () => expect(reconnects).toBe(1));
      } finally {
        raw.disconnect();
        await store.close();
      }
    });

    test("redis store - keeps every acknowledged increment across kill -9 and restart", async () => {
      const store = await RedisStore.connect({ url: durable.url, keyPrefix: uniquePrefix() });
      try {
        const fence = (await store.acquire(0, "node-a", LEASE_MS))!;
        const acked: IncrementOp[] = [];
        for (let batch = 0; batch < 20; batch++) {
          const ops = [0, 1, 2].map((i) => op(fence, `b${batch}-${i}`, { delta: i === 2 ? -1 : 2 }));
          const outcomes = await store.increment(ops, KEY_TTL_MS);
          expect(outcomes.every((o) => o.kind === "applied")).toBe(true);
          acked.push(...ops);
        }

        await durable.kill();
        await durable.restart();

        // Every call may still find the connection coming back (a StoreError, as callers get it and
        // retry): each is retried until it answers, and retrying any of them changes nothing.
        expect(await eventually(() => store.load("p1"))).toEqual({ likes: { dc1: { p: 80, n: 20 } } });
        const retries = await eventually(() => store.increment(acked, KEY_TTL_MS));
        expect(retries).toEqual(
          acked.map((o) => ({ kind: "duplicate", payload: o.payload, entry: { p: 80, n: 20 } })),
        );
        expect(await eventually(() => store.acquire(0, "node-a", LEASE_MS))).toMatchObject({
          epoch: fence.epoch,
        });
      } finally {
        await store.close();
      }
    });
  });
});
