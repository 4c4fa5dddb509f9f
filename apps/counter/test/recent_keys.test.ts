import type { IncrementRequest, NodeReply } from "@livecount/protocol";
import { silentLogger } from "@livecount/runtime";
import { MemoryStore, type Fence, type IncrementOp, type KeyRestore } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { RecentKeys, incrementChange, incrementUse } from "../src/recent_keys.js";

const MEMORY_MS = 3_000;
const KEY_TTL_MS = 60_000;

/** A queued increment of partition 0 whose reply the test reads. */
function pending(key: string, delta = 1, page = "p1") {
  const request: IncrementRequest = { type: "increment", page, counter: "likes", delta, key };
  const got: NodeReply[] = [];
  return { actor: { partition: 0 }, request, resolve: (reply: NodeReply) => got.push(reply), got };
}

function answered(p: ReturnType<typeof pending>, value: number): { pending: typeof p; reply: NodeReply } {
  const { page, counter } = p.request;
  return { pending: p, reply: { type: "incremented", page, counter, value, updatedAt: 5, duplicate: false } };
}

/** The memory of a node holding partition 0 under `fence()`, if any, over `store`. */
function keysOn(
  clock: ManualClock,
  store: MemoryStore,
  fence: () => Fence | undefined,
  maxKeys = 100,
): RecentKeys {
  const fenceOf = (partition: number) => (partition === 0 ? fence() : undefined);
  return new RecentKeys({
    clock,
    logger: silentLogger,
    store,
    fenceOf,
    keyTtlMs: KEY_TTL_MS,
    memoryMs: MEMORY_MS,
    maxKeys,
  });
}

/** `store.restoreKeys` with `before` run first on each call (it may wait, throw or record). */
function beforeRestore(
  store: MemoryStore,
  before: (records: readonly KeyRestore[]) => Promise<void> | void,
): void {
  const restore = store.restoreKeys.bind(store);
  store.restoreKeys = async (fence, records, ttl) => {
    await before(records);
    return restore(fence, records, ttl);
  };
}

/** A retry of p1's like under `key` that reached the store (the memory no longer answered it). */
function retryOp(fence: Fence, key: string): IncrementOp {
  return { fence, page: "p1", counter: "likes", dc: "dc1", delta: 1, key, payload: "{}" };
}

describe("counter - recent keys", () => {
  async function setUp(maxKeys = 100) {
    const clock = new ManualClock();
    const store = new MemoryStore({ now: () => clock.now() });
    const fence = (await store.acquire(0, "n1/a", KEY_TTL_MS))!;
    const keys = keysOn(clock, store, () => fence, maxKeys);
    return { clock, store, fence, keys };
  }

  test("counter - a retry within the memory gets the answer replayed; another change under the key is a conflict; other keys go on", async () => {
    const { clock, keys } = await setUp();
    const first = pending("k1");
    await keys.settled([answered(first, 7)], 0, incrementUse);
    await clock.advance(MEMORY_MS - 1);
    const [retry, other, conflict] = [pending("k1"), pending("k2"), pending("k1", 2)];
    const samePageElsewhere = pending("k1", 1, "p2");
    expect(keys.answer([retry, other, conflict, samePageElsewhere], incrementChange)).toEqual([
      other,
      samePageElsewhere,
    ]);
    expect(retry.got).toEqual([{ ...answered(first, 7).reply, duplicate: true }]);
    expect(conflict.got).toMatchObject([{ type: "error", code: "idempotency_conflict" }]);
  });

  /** The store answers a change every `everyMs` for `forMs`: the keys `k-<n>` from `first` on. */
  async function answering(keys: RecentKeys, clock: ManualClock, forMs: number, everyMs = 100, first = 100) {
    for (let n = first; n < first + forMs / everyMs; n++) {
      await clock.advance(everyMs);
      await keys.settled([answered(pending(`k-${n}`), n)], 0, incrementUse);
    }
  }

  test("counter - a key is forgotten once the store has answered for the memory, and errors are never remembered", async () => {
    const { clock, keys } = await setUp();
    const failed = { pending: pending("k2"), reply: errorOf() };
    await keys.settled([answered(pending("k1"), 1), failed], 0, incrementUse);
    expect(keys.size).toBe(1);
    await answering(keys, clock, MEMORY_MS - 100);
    expect(keys.answer([pending("k1")], incrementChange)).toEqual([]);
    await answering(keys, clock, 100, 100, 200);
    const retry = pending("k1");
    expect(keys.answer([retry], incrementChange)).toEqual([retry]);
  });

  test("counter - keys answered before an outage stay through it, and go once the store has answered for the memory again", async () => {
    const { clock, keys } = await setUp();
    await keys.settled([answered(pending("k1"), 1)], 0, incrementUse);
    // Nothing answered for half a minute (within the keys' TTL): the store is down.
    await clock.advance(30_000);
    expect(keys.answer([pending("k1")], incrementChange)).toEqual([]);
    // Back: the silence counts a sixth of the memory, the answers after it the rest.
    await keys.settled([answered(pending("k2"), 2)], 0, incrementUse);
    expect(keys.answer([pending("k1")], incrementChange)).toEqual([]);
    await answering(keys, clock, (MEMORY_MS * 5) / 6 - 100);
    expect(keys.answer([pending("k1")], incrementChange)).toEqual([]);
    await answering(keys, clock, 100, 100, 200);
    const late = pending("k1");
    expect(keys.answer([late], incrementChange)).toEqual([late]);
  });

  test("counter - a change answered after an outage, before the reconnect is found a restart, leaves the keys before it to be written back", async () => {
    const { clock, store, fence, keys } = await setUp();
    await keys.settled([answered(pending("k1"), 1)], 0, incrementUse);
    // Redis restarts without k1 and is back 10 s later; a change sent on the new connection is
    // answered before the server's run id is read and the reconnect found to be a restart.
    await clock.advance(10_000);
    await keys.settled([answered(pending("k2"), 2)], 0, incrementUse);
    await keys.restoreAll();
    expect(await store.increment([retryOp(fence, "k1")], KEY_TTL_MS)).toMatchObject([{ kind: "duplicate" }]);
  });

  test("counter - past the cap the oldest key is forgotten first", async () => {
    const { keys } = await setUp(2);
    await keys.settled(
      ["k1", "k2", "k3"].map((k, i) => answered(pending(k), i)),
      0,
      incrementUse,
    );
    expect(keys.size).toBe(2);
    const [k1, k3] = [pending("k1"), pending("k3")];
    expect(keys.answer([k1, k3], incrementChange)).toEqual([k1]);
    expect(k3.got).toHaveLength(1);
  });

  test("counter - once a change came back below the owner's count, the keys answered since the last write-back go to the store with their answers", async () => {
    const { clock, store, fence, keys } = await setUp();
    await keys.settled([answered(pending("k1"), 1), answered(pending("k2"), 2)], 0, incrementUse);
    await clock.advance(10);
    await keys.settled([answered(pending("k3"), 3)], 1, incrementUse);
    const retries = ["k1", "k2", "k3"].map((key) => retryOp(fence, key));
    const outcomes = await store.increment(retries, KEY_TTL_MS);
    expect(outcomes.map((o) => o.kind === "duplicate" && JSON.parse(o.payload))).toEqual([
      { value: 1, updatedAt: 5 },
      { value: 2, updatedAt: 5 },
      { value: 3, updatedAt: 5 },
    ]);
    // The next write-back takes only what was answered since: k4, not k1 to k3 again.
    const restored: string[] = [];
    beforeRestore(store, (records) => void restored.push(...records.map((r) => r.key)));
    await clock.advance(10);
    await keys.settled([answered(pending("k4"), 4)], 1, incrementUse);
    expect(restored).toEqual(["k4"]);
  });
});

function errorOf(): NodeReply {
  return { type: "error", code: "unavailable", message: "the store did not answer; retry" };
}

describe("counter - recent keys whose write-back failed", () => {
  test("counter - keys a write-back could not write go with the next change answered", async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ now: () => clock.now() });
    const fence = (await store.acquire(0, "n1/a", KEY_TTL_MS))!;
    let failures = 1;
    beforeRestore(store, () => {
      if (failures-- > 0) throw new Error("Redis went away again");
    });
    const keys = keysOn(clock, store, () => fence);
    await keys.settled([answered(pending("k1"), 1)], 0, incrementUse);
    await keys.restoreAll();
    await keys.settled([answered(pending("k2"), 2)], 0, incrementUse);
    // Long after the memory forgot it (each answer after a silence counts a sixth of the memory),
    // the store answers k1's retry.
    for (let i = 3; i <= 8; i++) {
      await clock.advance(MEMORY_MS);
      await keys.settled([answered(pending(`k${i}`), i)], 0, incrementUse);
    }
    expect(keys.answer([pending("k1")], incrementChange)).toHaveLength(1);
    expect(await store.increment([retryOp(fence, "k1")], KEY_TTL_MS)).toMatchObject([{ kind: "duplicate" }]);
  });
});

describe("counter - recent keys while a write-back is in flight", () => {
  test("counter - a key written back after a reconnect is answered from memory until the store has it, however the store answers meanwhile", async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ now: () => clock.now() });
    const fence = (await store.acquire(0, "n1/a", KEY_TTL_MS))!;
    // The write-back waits for the store (one round trip per partition, after every other one).
    let release = (): void => {};
    const gate = new Promise<void>((resolve) => (release = resolve));
    beforeRestore(store, () => gate);
    const keys = keysOn(clock, store, () => fence);
    await keys.settled([answered(pending("k1"), 1)], 0, incrementUse);
    // Redis restarts without k1 and is back after longer than the memory.
    await clock.advance(MEMORY_MS * 2);
    const restoring = keys.restoreAll();
    // The commit chain goes on meanwhile: the store answers another change.
    await keys.settled([answered(pending("k2"), 2)], 0, incrementUse);
    const retry = pending("k1");
    expect(keys.answer([retry], incrementChange)).toEqual([]);
    expect(retry.got).toMatchObject([{ value: 1, duplicate: true }]);
    release();
    await restoring;
    // Written back: the store answers it from now on.
    expect(await store.increment([retryOp(fence, "k1")], KEY_TTL_MS)).toMatchObject([{ kind: "duplicate" }]);
  });
});

describe("counter - recent keys after an outage that outlasted the partition's lease", () => {
  test("counter - keys of a partition not held when the store came back are written back once it is held again", async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ now: () => clock.now() });
    // A lease of 5 s, which lapses in the outage below.
    let fence: Fence | undefined = (await store.acquire(0, "n1/a", 5_000)) ?? undefined;
    const keys = keysOn(clock, store, () => fence);
    await keys.settled([answered(pending("k1"), 1)], 0, incrementUse);
    // Redis's machine crashed (k1 lost with its last second) and came back after the lease lapsed.
    await clock.advance(20_000);
    fence = undefined;
    await keys.restoreAll();
    // The node takes the partition again, and the store answers changes for longer than the memory.
    fence = (await store.acquire(0, "n1/b", KEY_TTL_MS)) ?? undefined;
    for (let i = 2; i <= 4; i++) {
      await clock.advance(MEMORY_MS);
      await keys.settled([answered(pending(`k${i}`), i)], 0, incrementUse);
    }
    // A late retry of k1 (the SDK's, after its request timeout) is not counted again.
    const retry = pending("k1");
    const left = keys.answer([retry], incrementChange);
    const outcomes = left.length === 0 ? [] : await store.increment([retryOp(fence!, "k1")], KEY_TTL_MS);
    expect(outcomes.filter((o) => o.kind === "applied")).toEqual([]);
  });
});
