/**
 * What every Store must do with idempotent increments: apply each op's changes atomically under its
 * key, answer a retry with what the first try stored, refuse a conflicting reuse of a key, a stale
 * fence, and a change past 2^53 - 1, and forget a key keyTtlMs after it was recorded.
 */
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import { InvalidStoreInputError, type Lease, type Store } from "@livecount/store";
import { LEASE_MS, PARTITIONS, incrementOp, leaseOf, pageIn, type OpenStore } from "./contract_stores.js";

const START_MS = 1_700_000_000_000;
const KEY_TTL_MS = 60_000;

export function describeIncrementContract(name: string, open: OpenStore): void {
  describe(`${name} increment contract`, () => {
    let store: Store;
    let nowMs: number;
    const advance = (ms: number): void => {
      nowMs += ms;
    };

    beforeEach(async () => {
      nowMs = START_MS;
      store = await open(() => nowMs);
    });

    afterEach(async () => {
      await store.close();
    });

    const lease = (partition = 0, node = "node-a"): Promise<Lease> => leaseOf(store, partition, node);
    const op = incrementOp;

    test(`${name} - increment adds a positive delta to p and a negative one to n`, async () => {
      const fence = await lease();
      const outcomes = await store.increment(
        [
          op(fence, { delta: 5, key: "a" }),
          op(fence, { delta: -2, key: "b" }),
          op(fence, { dc: "dc2", key: "c" }),
        ],
        KEY_TTL_MS,
      );
      expect(outcomes).toEqual([
        { kind: "applied", entry: { p: 5, n: 0 } },
        { kind: "applied", entry: { p: 5, n: 2 } },
        { kind: "applied", entry: { p: 1, n: 0 } },
      ]);
      expect(await store.load("p1")).toEqual({ likes: { dc1: { p: 5, n: 2 }, dc2: { p: 1, n: 0 } } });
    });

    test(`${name} - a retried key is a duplicate with the first payload and counts once`, async () => {
      const fence = await lease();
      await store.increment([op(fence, { payload: "first" })], KEY_TTL_MS);
      const [again] = await store.increment([op(fence, { payload: "second" })], KEY_TTL_MS);
      // The entry as it is now comes with it: the first try's, even if its answer was lost.
      expect(again).toEqual({ kind: "duplicate", payload: "first", entry: { p: 1, n: 0 } });
      expect(await store.load("p1")).toEqual({ likes: { dc1: { p: 1, n: 0 } } });
    });

    test(`${name} - {own} in a payload is stored as the entry's value right after the op; a duplicate earlier in the call does not move it`, async () => {
      const fence = await lease();
      await store.increment([op(fence, { key: "k1", delta: 5 })], KEY_TTL_MS);
      const outcomes = await store.increment(
        [
          op(fence, { key: "k1", delta: 5, payload: "retry {own}" }),
          op(fence, { key: "k2", delta: 5, payload: "v={own}, again {own}" }),
          op(fence, { key: "k3", delta: -2, payload: "v={own}" }),
        ],
        KEY_TTL_MS,
      );
      expect(outcomes).toEqual([
        { kind: "duplicate", payload: "first", entry: { p: 5, n: 0 } },
        { kind: "applied", entry: { p: 10, n: 0 } },
        { kind: "applied", entry: { p: 10, n: 2 } },
      ]);
      const retries = await store.increment(
        [op(fence, { key: "k2", delta: 5 }), op(fence, { key: "k3", delta: -2 })],
        KEY_TTL_MS,
      );
      expect(retries).toEqual([
        { kind: "duplicate", payload: "v=10, again 10", entry: { p: 10, n: 2 } },
        { kind: "duplicate", payload: "v=8", entry: { p: 10, n: 2 } },
      ]);
    });

    test(`${name} - the same key twice in one call applies once`, async () => {
      const fence = await lease();
      const outcomes = await store.increment([op(fence), op(fence, { payload: "other" })], KEY_TTL_MS);
      expect(outcomes).toEqual([
        { kind: "applied", entry: { p: 1, n: 0 } },
        { kind: "duplicate", payload: "first", entry: { p: 1, n: 0 } },
      ]);
    });

    test(`${name} - a key reused for another delta or counter is a conflict`, async () => {
      const fence = await lease();
      await store.increment([op(fence)], KEY_TTL_MS);
      const outcomes = await store.increment(
        [op(fence, { delta: 2 }), op(fence, { counter: "hearts" }), op(fence, { delta: -1 })],
        KEY_TTL_MS,
      );
      expect(outcomes).toEqual([{ kind: "conflict" }, { kind: "conflict" }, { kind: "conflict" }]);
      expect(await store.load("p1")).toEqual({ likes: { dc1: { p: 1, n: 0 } } });
    });

    test(`${name} - restoreKeys writes records a retry is answered from, replacing what the key held; a stale fence writes none`, async () => {
      const fence = await lease();
      await store.increment([op(fence, { key: "k1", payload: "first" })], KEY_TTL_MS);
      const restored = [
        { page: "p1", key: "k1", counter: "likes", delta: 1, payload: "corrected" },
        { page: "p1", key: "lost", counter: "likes", delta: 2, payload: "was lost" },
        { page: "p1", key: "r1", counter: "likes", delta: -4, fingerprint: "reset:likes", payload: "reset" },
      ];
      expect(await store.restoreKeys(fence, restored, KEY_TTL_MS)).toBe(true);
      const reset = op(fence, { key: "r1", delta: -9, fingerprint: "reset:likes" });
      const again = [op(fence, { key: "k1" }), op(fence, { key: "lost", delta: 2 }), reset];
      expect(
        (await store.increment(again, KEY_TTL_MS)).map((o) => (o.kind === "duplicate" ? o.payload : o.kind)),
      ).toEqual(["corrected", "was lost", "reset"]);
      expect(await store.increment([op(fence, { key: "lost", delta: 1 })], KEY_TTL_MS)).toEqual([
        { kind: "conflict" },
      ]);
      expect(await store.load("p1")).toEqual({ likes: { dc1: { p: 1, n: 0 } } });
      // Kept for keyTtlMs from the restore, then a new change.
      advance(KEY_TTL_MS);
      expect(await store.increment([op(fence, { key: "lost", delta: 2 })], KEY_TTL_MS)).toMatchObject([
        { kind: "applied" },
      ]);
      advance(LEASE_MS);
      const taken = await lease(0, "node-b");
      const late = [{ page: "p1", key: "late", counter: "likes", delta: 1, payload: "late" }];
      expect(await store.restoreKeys(fence, late, KEY_TTL_MS)).toBe(false);
      expect(await store.increment([op(taken, { key: "late" })], KEY_TTL_MS)).toMatchObject([
        { kind: "applied" },
      ]);
    });

    test(`${name} - importKeys writes only the keys that hold no live record, and needs no lease`, async () => {
      await store.increment([op(await lease(), { key: "old", payload: "expired" })], KEY_TTL_MS);
      advance(KEY_TTL_MS);
      const fence = await lease();
      await store.increment([op(fence, { key: "mine", payload: "answered here" })], KEY_TTL_MS);
      await store.increment([op(fence, { key: "fresh", payload: "answered here too" })], KEY_TTL_MS);
      const theirs = ["mine", "old", "new"].map((key) => ({
        page: "p1",
        key,
        counter: "likes",
        delta: 1,
        payload: `from another dc: ${key}`,
      }));
      expect(await store.importKeys(new Map([[0, theirs]]), KEY_TTL_MS)).toBe(2);
      // Again (a message delivered twice): what it wrote is live now, so nothing.
      expect(await store.importKeys(new Map([[0, theirs]]), KEY_TTL_MS)).toBe(0);
      const again = ["mine", "old", "new", "fresh"].map((key) => op(fence, { key }));
      expect(
        (await store.increment(again, KEY_TTL_MS)).map((o) => (o.kind === "duplicate" ? o.payload : o.kind)),
      ).toEqual(["answered here", "from another dc: old", "from another dc: new", "answered here too"]);
      expect(await store.load("p1")).toEqual({ likes: { dc1: { p: 3, n: 0 } } });
    });

    test(`${name} - importKeys of every partition at once, more keys than one script call takes, stores each`, async () => {
      const fences = await Promise.all(Array.from({ length: PARTITIONS }, (_, p) => lease(p)));
      const byPartition = new Map(
        fences.map((fence) => [
          fence.partition,
          Array.from({ length: 30 }, (_, i) => ({
            page: pageIn(fence.partition, i % 3),
            key: `k-${fence.partition}-${i}`,
            counter: "likes",
            delta: 1,
            payload: `from another dc: ${fence.partition}-${i}`,
          })),
        ]),
      );
      // One key of each partition this DC answered first: it keeps its own answer.
      await store.increment(
        fences.map((fence) =>
          op(fence, { page: pageIn(fence.partition, 0), key: `k-${fence.partition}-0`, payload: "here" }),
        ),
        KEY_TTL_MS,
      );
      expect(await store.importKeys(byPartition, KEY_TTL_MS)).toBe(PARTITIONS * 29);
      for (const fence of fences) {
        const retries = byPartition.get(fence.partition)!.map((r) => op(fence, { page: r.page, key: r.key }));
        const answers = (await store.increment(retries, KEY_TTL_MS)).map((o) =>
          o.kind === "duplicate" ? o.payload : o.kind,
        );
        expect(answers).toEqual(
          byPartition.get(fence.partition)!.map((r, i) => (i === 0 ? "here" : r.payload)),
        );
      }
    });

    test(`${name} - a stale fence applies nothing and does not record the key`, async () => {
      const old = await lease(0, "node-a");
      advance(LEASE_MS);
      const current = await lease(0, "node-b");
      expect(await store.increment([op(old)], KEY_TTL_MS)).toEqual([{ kind: "stale" }]);
      expect(await store.load("p1")).toEqual({});
      expect(await store.increment([op(current)], KEY_TTL_MS)).toEqual([
        { kind: "applied", entry: { p: 1, n: 0 } },
      ]);
    });

    test(`${name} - a fence whose lease ran out and that nobody took still applies: only a takeover stales it`, async () => {
      const held = await lease(0, "node-a");
      advance(10 * LEASE_MS);
      expect(await store.increment([op(held)], KEY_TTL_MS)).toEqual([
        { kind: "applied", entry: { p: 1, n: 0 } },
      ]);
    });

    test(`${name} - a retry through the new owner after failover is a duplicate`, async () => {
      const old = await lease(0, "node-a");
      await store.increment([op(old)], KEY_TTL_MS);
      advance(LEASE_MS);
      const current = await lease(0, "node-b");
      expect(await store.increment([op(old)], KEY_TTL_MS)).toEqual([{ kind: "stale" }]);
      expect(await store.increment([op(current, { payload: "retry" })], KEY_TTL_MS)).toEqual([
        { kind: "duplicate", payload: "first", entry: { p: 1, n: 0 } },
      ]);
    });

    test(`${name} - keys are scoped to the page even when ids contain ':'`, async () => {
      const fence = await lease();
      const outcomes = await store.increment(
        [
          op(fence, { page: "a:b", key: "c" }),
          op(fence, { page: "a", key: "b:c" }),
          op(fence, { page: "a:b:c", key: "" }),
        ],
        KEY_TTL_MS,
      );
      expect(outcomes.map((o) => o.kind)).toEqual(["applied", "applied", "applied"]);
    });

    test(`${name} - a zero delta records the key and creates no entry`, async () => {
      const fence = await lease();
      expect(await store.increment([op(fence, { delta: 0 })], KEY_TTL_MS)).toEqual([
        { kind: "applied", entry: { p: 0, n: 0 } },
      ]);
      expect(await store.increment([op(fence, { delta: 0 })], KEY_TTL_MS)).toEqual([
        { kind: "duplicate", payload: "first" },
      ]);
      expect(await store.load("p1")).toEqual({});
      expect((await store.listPages("", undefined, 10)).pages).toEqual([]);
    });

    test(`${name} - a key is forgotten keyTtlMs after it was recorded`, async () => {
      const fence = await lease();
      const keyTtlMs = LEASE_MS / 2;
      await store.increment([op(fence)], keyTtlMs);
      advance(keyTtlMs - 1);
      expect(await store.increment([op(fence)], keyTtlMs)).toEqual([
        { kind: "duplicate", payload: "first", entry: { p: 1, n: 0 } },
      ]);
      advance(1);
      expect(await store.increment([op(fence, { delta: 2, payload: "again" })], keyTtlMs)).toEqual([
        { kind: "applied", entry: { p: 3, n: 0 } },
      ]);
      expect(await store.increment([op(fence)], keyTtlMs)).toEqual([{ kind: "conflict" }]);
    });

    test(`${name} - a key with a fingerprint is a duplicate for the same fingerprint whatever the delta`, async () => {
      const fence = await lease();
      await store.increment([op(fence, { delta: 5, key: "seed" })], KEY_TTL_MS);
      const reset = op(fence, { delta: -5, key: "r", fingerprint: "reset:likes", payload: "reset-1" });
      expect(await store.increment([reset], KEY_TTL_MS)).toEqual([
        { kind: "applied", entry: { p: 5, n: 5 } },
      ]);
      await store.increment([op(fence, { delta: 2, key: "later" })], KEY_TTL_MS);
      const retry = { ...reset, delta: -2, payload: "reset-2" };
      expect(await store.increment([retry], KEY_TTL_MS)).toEqual([
        { kind: "duplicate", payload: "reset-1", entry: { p: 7, n: 5 } },
      ]);
      expect(await store.load("p1")).toEqual({ likes: { dc1: { p: 7, n: 5 } } });
    });

    test(`${name} - fingerprinted and plain changes under one key conflict both ways`, async () => {
      const fence = await lease();
      await store.increment([op(fence, { key: "plain" })], KEY_TTL_MS);
      await store.increment([op(fence, { key: "fp", fingerprint: "reset:likes" })], KEY_TTL_MS);
      const outcomes = await store.increment(
        [
          op(fence, { key: "plain", fingerprint: "reset:likes" }),
          op(fence, { key: "fp" }),
          op(fence, { key: "fp", fingerprint: "delete:likes" }),
        ],
        KEY_TTL_MS,
      );
      expect(outcomes).toEqual([{ kind: "conflict" }, { kind: "conflict" }, { kind: "conflict" }]);
      expect(await store.load("p1")).toEqual({ likes: { dc1: { p: 2, n: 0 } } });
    });

    test(`${name} - changes in also apply atomically with the op under its key`, async () => {
      const fence = await lease();
      await store.increment([op(fence, { delta: 3, key: "seed" })], KEY_TTL_MS);
      const del = op(fence, {
        key: "d",
        delta: -3,
        fingerprint: "delete:likes",
        also: [
          { counter: "@del:likes", delta: 6 },
          { counter: "other", delta: -1 },
          { counter: "zero", delta: 0 },
        ],
      });
      expect(await store.increment([del], KEY_TTL_MS)).toEqual([
        {
          kind: "applied",
          entry: { p: 3, n: 3 },
          also: [
            { p: 6, n: 0 },
            { p: 0, n: 1 },
            { p: 0, n: 0 },
          ],
        },
      ]);
      expect(
        await store.increment([{ ...del, also: [{ counter: "@del:likes", delta: 9 }] }], KEY_TTL_MS),
      ).toEqual([
        {
          kind: "duplicate",
          payload: "first",
          entry: { p: 3, n: 3 },
          also: [{ p: 6, n: 0 }],
        },
      ]);
      expect(await store.load("p1")).toEqual({
        likes: { dc1: { p: 3, n: 3 } },
        "@del:likes": { dc1: { p: 6, n: 0 } },
        other: { dc1: { p: 0, n: 1 } },
      });
    });

    test(`${name} - a stale fence applies none of also`, async () => {
      const old = await lease(0, "node-a");
      advance(LEASE_MS);
      await lease(0, "node-b");
      const del = op(old, { delta: 0, also: [{ counter: "@del:likes", delta: 1 }] });
      expect(await store.increment([del], KEY_TTL_MS)).toEqual([{ kind: "stale" }]);
      expect(await store.load("p1")).toEqual({});
    });

    test(`${name} - a change past 2^53 - 1 is too_large: nothing applied, its key unrecorded, a retry of an applied op still a duplicate`, async () => {
      const MAX = Number.MAX_SAFE_INTEGER;
      const fence = await lease();
      const outcomes = await store.increment(
        [
          op(fence, { key: "seed", delta: MAX - 5 }),
          // Exactly to the limit, then past it: ops of one call count the earlier ones.
          op(fence, { key: "to-max", delta: 5 }),
          op(fence, { key: "past", delta: 1 }),
          // n has room of its own.
          op(fence, { key: "down", delta: -MAX }),
          op(fence, { key: "down-past", delta: -1 }),
        ],
        KEY_TTL_MS,
      );
      expect(outcomes).toEqual([
        { kind: "applied", entry: { p: MAX - 5, n: 0 } },
        { kind: "applied", entry: { p: MAX, n: 0 } },
        { kind: "too_large" },
        { kind: "applied", entry: { p: MAX, n: MAX } },
        { kind: "too_large" },
      ]);
      expect(
        await store.increment(
          [op(fence, { key: "to-max", delta: 5 }), op(fence, { key: "past", delta: 1 })],
          KEY_TTL_MS,
        ),
      ).toEqual([{ kind: "duplicate", payload: "first", entry: { p: MAX, n: MAX } }, { kind: "too_large" }]);
      // The refused key was never recorded: it is free for another change.
      expect(await store.increment([op(fence, { key: "past", delta: 0 })], KEY_TTL_MS)).toEqual([
        { kind: "applied", entry: { p: MAX, n: MAX } },
      ]);
      expect(await store.load("p1")).toEqual({ likes: { dc1: { p: MAX, n: MAX } } });
    });

    test(`${name} - too_large counts also's changes and where an absent entry starts, and applies none of the op`, async () => {
      const MAX = Number.MAX_SAFE_INTEGER;
      const fence = await lease();
      await store.increment([op(fence, { key: "seed", counter: "@del:likes", delta: MAX - 1 })], KEY_TTL_MS);
      const outcomes = await store.increment(
        [
          op(fence, { key: "del", delta: 3, also: [{ counter: "@del:likes", delta: 2 }] }),
          op(fence, { key: "floor", counter: "fresh", delta: 2, startAt: MAX - 1 }),
          op(fence, { key: "fits", counter: "fresh", delta: 1, startAt: MAX - 1 }),
        ],
        KEY_TTL_MS,
      );
      expect(outcomes).toEqual([
        { kind: "too_large" },
        { kind: "too_large" },
        { kind: "applied", entry: { p: MAX, n: MAX - 1 } },
      ]);
      expect(await store.load("p1")).toEqual({
        "@del:likes": { dc1: { p: MAX - 1, n: 0 } },
        fresh: { dc1: { p: MAX, n: MAX - 1 } },
      });
    });

    test(`${name} - a page whose only entry comes from also is listed`, async () => {
      const fence = await lease();
      const del = op(fence, { page: "only-also", delta: 0, also: [{ counter: "@del:likes", delta: 1 }] });
      expect(await store.increment([del], KEY_TTL_MS)).toEqual([
        { kind: "applied", entry: { p: 0, n: 0 }, also: [{ p: 1, n: 0 }] },
      ]);
      expect((await store.listPages("only", undefined, 10)).pages).toEqual(["only-also"]);
    });

    test(`${name} - increment rejects also changing a counter twice, a bad delta or an empty fingerprint`, async () => {
      const fence = await lease();
      for (const bad of [
        op(fence, { key: "a", also: [{ counter: "likes", delta: 1 }] }),
        op(fence, {
          key: "b",
          also: [
            { counter: "x", delta: 1 },
            { counter: "x", delta: 2 },
          ],
        }),
        op(fence, { key: "c", also: [{ counter: "x", delta: 0.5 }] }),
        op(fence, { key: "d", fingerprint: "" }),
      ]) {
        await expect(store.increment([op(fence, { key: "ok" }), bad], KEY_TTL_MS)).rejects.toBeInstanceOf(
          InvalidStoreInputError,
        );
      }
      expect(await store.load("p1")).toEqual({});
    });

    test(`${name} - increment rejects a delta that is not a safe integer`, async () => {
      const fence = await lease();
      await expect(
        store.increment([op(fence), op(fence, { key: "k2", delta: 0.5 })], KEY_TTL_MS),
      ).rejects.toBeInstanceOf(InvalidStoreInputError);
      expect(await store.load("p1")).toEqual({});
    });
  });
}
