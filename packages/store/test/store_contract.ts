/**
 * The behaviour every Store must show, run against each implementation. Time is a manual clock
 * handed to the store, so lease and key expiry are exact and tests never sleep.
 */
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import {
  InvalidStoreInputError,
  StoreError,
  bucketOf,
  type Fence,
  type IncrementOp,
  type Lease,
  type Store,
} from "@livecount/store";

/** Opens a fresh, empty store reading time from `now`. */
export type OpenStore = (now: () => number) => Promise<Store>;

const START_MS = 1_700_000_000_000;
export const LEASE_MS = 10_000;
const KEY_TTL_MS = 60_000;

/** A lease of `partition` for `node` (LEASE_MS); fails the test when another node holds it. */
export async function leaseOf(store: Store, partition: number, node: string): Promise<Lease> {
  const l = await store.acquire(partition, node, LEASE_MS);
  if (l === null) throw new Error(`partition ${partition} is held by another node`);
  return l;
}

/** An increment of p1's likes in dc1 by 1 under key k1, with `overrides`. */
export function incrementOp(fence: Fence, overrides: Partial<IncrementOp> = {}): IncrementOp {
  return {
    fence,
    page: "p1",
    counter: "likes",
    dc: "dc1",
    delta: 1,
    key: "k1",
    payload: "first",
    ...overrides,
  };
}

export function describeStoreContract(name: string, open: OpenStore): void {
  describe(`${name} contract`, () => {
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

    describe("leases", () => {
      test(`${name} - acquire takes a free partition at epoch 1 until now + ttl`, async () => {
        expect(await store.acquire(3, "node-a", LEASE_MS)).toEqual({
          partition: 3,
          node: "node-a",
          epoch: 1,
          expiresAt: START_MS + LEASE_MS,
        });
      });

      test(`${name} - the holder keeps its epoch when it re-acquires a live lease`, async () => {
        await lease(0, "node-a");
        advance(LEASE_MS - 1);
        expect(await store.acquire(0, "node-a", LEASE_MS)).toMatchObject({
          epoch: 1,
          expiresAt: START_MS + 2 * LEASE_MS - 1,
        });
      });

      test(`${name} - acquire refuses a partition another node holds`, async () => {
        await lease(0, "node-a");
        advance(LEASE_MS - 1);
        expect(await store.acquire(0, "node-b", LEASE_MS)).toBeNull();
      });

      test(`${name} - a lease expires exactly at expiresAt and a takeover bumps the epoch`, async () => {
        await lease(0, "node-a");
        advance(LEASE_MS);
        expect(await store.acquire(0, "node-b", LEASE_MS)).toMatchObject({ node: "node-b", epoch: 2 });
        expect(await store.acquire(0, "node-a", LEASE_MS)).toBeNull();
      });

      test(`${name} - re-acquiring one's own expired lease bumps the epoch`, async () => {
        await lease(0, "node-a");
        advance(LEASE_MS);
        expect(await store.acquire(0, "node-a", LEASE_MS)).toMatchObject({ epoch: 2 });
      });

      test(`${name} - release frees the partition and its epoch is never reused`, async () => {
        await store.release(await lease(0, "node-a"));
        const taken = await lease(0, "node-b");
        expect(taken).toMatchObject({ node: "node-b", epoch: 2 });
        await store.release(taken);
        expect(await store.acquire(0, "node-a", LEASE_MS)).toMatchObject({ epoch: 3 });
      });

      test(`${name} - release of a lost lease leaves the new holder alone`, async () => {
        const old = await lease(0, "node-a");
        advance(LEASE_MS);
        const current = await lease(0, "node-b");
        await store.release(old);
        expect(await store.acquire(0, "node-a", LEASE_MS)).toBeNull();
        expect(await store.renew([current], LEASE_MS)).toHaveLength(1);
      });

      test(`${name} - renew extends held leases and leaves out lost ones`, async () => {
        const lost = await lease(2, "node-a");
        const released = await lease(3, "node-a");
        await store.release(released);
        advance(LEASE_MS / 2);
        const held = await lease(1, "node-a");
        const other = await lease(4, "node-a");
        advance(LEASE_MS / 2);
        await lease(2, "node-b");

        const renewed = await store.renew(
          [held, lost, released, { ...other, node: "node-b" }, other],
          LEASE_MS,
        );
        expect(renewed).toEqual([
          { ...held, expiresAt: nowMs + LEASE_MS },
          { ...other, expiresAt: nowMs + LEASE_MS },
        ]);
        advance(LEASE_MS - 1);
        expect(await store.acquire(1, "node-b", LEASE_MS)).toBeNull();
      });

      test(`${name} - a lease that ran out is renewed with its epoch while nobody took it`, async () => {
        const l = await lease(0, "node-a");
        advance(LEASE_MS);
        const writes = [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } }];
        // Ran out and nobody took it: its fence still writes (only a takeover's epoch stales it),
        // its renewal keeps its epoch, and meanwhile another node could have taken it.
        expect(await store.write([{ fence: l, writes }])).toEqual([]);
        expect(await store.renew([l], LEASE_MS)).toEqual([{ ...l, expiresAt: nowMs + LEASE_MS }]);
        expect(await store.write([{ fence: l, writes }])).toEqual([]);
        expect(await store.acquire(0, "node-b", LEASE_MS)).toBeNull();
      });

      test(`${name} - a lease that ran out and was taken is not renewed by its former holder`, async () => {
        const l = await lease(0, "node-a");
        advance(LEASE_MS);
        const taken = await lease(0, "node-b");
        expect(await store.renew([l], LEASE_MS)).toEqual([]);
        expect(await store.renew([taken], LEASE_MS)).toHaveLength(1);
        // Taken and released: the former holder still cannot have it back by renewing.
        await store.release(taken);
        expect(await store.renew([l], LEASE_MS)).toEqual([]);
        expect(await store.acquire(0, "node-a", LEASE_MS)).toMatchObject({ epoch: 3 });
      });

      test(`${name} - epochs are counted per partition`, async () => {
        await lease(0, "node-a");
        advance(LEASE_MS);
        await lease(0, "node-a");
        expect(await store.acquire(1, "node-a", LEASE_MS)).toMatchObject({ epoch: 1 });
      });

      test(`${name} - renew of nothing is nothing`, async () => {
        expect(await store.renew([], LEASE_MS)).toEqual([]);
      });

      test(`${name} - bus notes: by the store's clock, a stretch kept while it goes on and begun anew after a break, node ids kept as given`, async () => {
        expect((await store.busHeard()).notes).toEqual(new Map());
        await store.noteBusHeard("counter-1", false);
        const first = (await store.busHeard()).notes.get("counter-1")!;
        expect(first.since).toBe(first.at);
        advance(5);
        await new Promise((resolve) => setTimeout(resolve, 5));
        await store.noteBusHeard("counter-1", true);
        await store.noteBusHeard("counter:{2}", true);
        const { now, notes } = await store.busHeard();
        const going = notes.get("counter-1")!;
        expect(going.since).toBe(first.since);
        expect(going.at).toBeGreaterThan(first.at);
        // Continuing with no earlier note begins a stretch.
        expect(notes.get("counter:{2}")!.since).toBe(notes.get("counter:{2}")!.at);
        expect(now).toBeGreaterThanOrEqual(going.at);
        advance(5);
        await new Promise((resolve) => setTimeout(resolve, 5));
        await store.noteBusHeard("counter-1", false);
        const anew = (await store.busHeard()).notes.get("counter-1")!;
        expect(anew.since).toBe(anew.at);
        expect(anew.since).toBeGreaterThan(going.at);
      });

      test(`${name} - rejects a ttl that is not a positive integer`, async () => {
        await expect(store.acquire(0, "node-a", 0)).rejects.toBeInstanceOf(InvalidStoreInputError);
        await expect(store.renew([], 1.5)).rejects.toBeInstanceOf(InvalidStoreInputError);
      });
    });

    describe("write", () => {
      test(`${name} - write max-merges each field of each entry`, async () => {
        const fence = await lease();
        await store.write([
          { fence, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 5, n: 1 } }] },
        ]);
        const stale = await store.write([
          {
            fence,
            writes: [
              { page: "p1", counter: "likes", dc: "dc1", entry: { p: 3, n: 4 } },
              { page: "p1", counter: "likes", dc: "dc2", entry: { p: 7, n: 0 } },
            ],
          },
        ]);
        expect(stale).toEqual([]);
        expect(await store.load("p1")).toEqual({ likes: { dc1: { p: 5, n: 4 }, dc2: { p: 7, n: 0 } } });
      });

      test(`${name} - indexed entries are listed per partition while non-zero, and only those`, async () => {
        const fence = await lease(3);
        const other = await lease(4);
        const viewers = (page: string, p: number, n: number, indexed = true) => ({
          page,
          counter: "@viewers",
          dc: "dc1",
          entry: { p, n },
          indexed,
        });
        await store.write([
          { fence, writes: [viewers("a:*[x", 3, 1), viewers("b", 2, 2), viewers("c", 5, 0, false)] },
          { fence: other, writes: [viewers("d", 1, 0)] },
        ]);
        expect(await store.nonZeroEntries(3)).toEqual([{ page: "a:*[x", counter: "@viewers", dc: "dc1" }]);
        expect(await store.nonZeroEntries(4)).toEqual([{ page: "d", counter: "@viewers", dc: "dc1" }]);
        // Back to zero: no longer listed. A stale fence changes nothing in the index either.
        await store.write([{ fence, writes: [viewers("a:*[x", 3, 3)] }]);
        expect(await store.nonZeroEntries(3)).toEqual([]);
        advance(LEASE_MS);
        await lease(4, "node-b");
        expect(await store.write([{ fence: other, writes: [viewers("d", 1, 1)] }])).toEqual([other]);
        expect(await store.nonZeroEntries(4)).toEqual([{ page: "d", counter: "@viewers", dc: "dc1" }]);
      });

      test(`${name} - a counter named __proto__ loads as a counter and pollutes nothing`, async () => {
        const fence = await lease();
        await store.write([
          { fence, writes: [{ page: "p1", counter: "__proto__", dc: "dc1", entry: { p: 4, n: 1 } }] },
        ]);
        const record = await store.load("p1");
        expect(Object.hasOwn(record, "__proto__")).toBe(true);
        expect(Object.getOwnPropertyDescriptor(record, "__proto__")?.value).toEqual({ dc1: { p: 4, n: 1 } });
        expect(Object.getPrototypeOf(record)).toBe(Object.prototype);
        expect(Object.hasOwn(Object.prototype, "dc1")).toBe(false);
      });

      test(`${name} - every read of whole pages keeps counters named like Object's properties`, async () => {
        const fence = await lease();
        const entry = { p: 4, n: 1 };
        const names = ["__proto__", "constructor", "toString", "hasOwnProperty"];
        await store.write([
          { fence, writes: names.map((counter) => ({ page: "p1", counter, dc: "dc1", entry })) },
        ]);
        const expected = Object.fromEntries(names.map((counter) => [counter, { dc1: entry }]));
        const [many] = await store.loadMany(["p1"]);
        const inBucket = (await store.bucketPages(0, [bucketOf("p1")])).get("p1")!;
        for (const record of [await store.load("p1"), many!, inBucket]) {
          expect(Object.getPrototypeOf(record)).toBe(Object.prototype);
          for (const counter of names) {
            expect(Object.getOwnPropertyDescriptor(record, counter)?.value).toEqual({ dc1: entry });
          }
          expect(record).toEqual(expected);
        }
      });

      test(`${name} - write keeps counts exact up to the largest safe integer`, async () => {
        const fence = await lease();
        const entry = { p: Number.MAX_SAFE_INTEGER, n: Number.MAX_SAFE_INTEGER - 1 };
        await store.write([{ fence, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry }] }]);
        expect(await store.load("p1")).toEqual({ likes: { dc1: entry } });
      });

      test(`${name} - a zero entry for an absent one writes nothing`, async () => {
        const fence = await lease();
        await store.write([
          { fence, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 0, n: 0 } }] },
        ]);
        expect(await store.load("p1")).toEqual({});
        expect(await store.listPages("", undefined, 10)).toEqual({ pages: [], cursor: undefined });
      });

      test(`${name} - write rejects a stale fence and writes nothing of it`, async () => {
        const taken = await lease(0, "node-a");
        const released = await lease(1, "node-a");
        await store.release(released);
        advance(LEASE_MS);
        const current = await lease(0, "node-b");
        const w = { page: "p1", counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } };
        const inReleased = { ...w, page: "p2" };
        expect(await store.write([{ fence: taken, writes: [w] }])).toEqual([taken]);
        expect(await store.write([{ fence: released, writes: [inReleased] }])).toEqual([released]);
        expect(
          await store.write([{ fence: { ...current, epoch: current.epoch + 1 }, writes: [w] }]),
        ).toHaveLength(1);
        expect(await store.write([{ fence: taken, writes: [w] }])).toEqual([taken]);
        expect(await store.load("p1")).toEqual({});
        expect(await store.load("p2")).toEqual({});
      });

      test(`${name} - write applies every current group and returns the one stale fence`, async () => {
        const a = await lease(0, "node-a");
        const lost = await lease(1, "node-a");
        advance(LEASE_MS - 1);
        const b = await store.acquire(2, "node-a", LEASE_MS);
        await store.acquire(0, "node-a", LEASE_MS);
        advance(1); // partition 1 expires and another node takes it; 0 was re-acquired, 2 is fresh
        await lease(1, "node-b");
        const stale = await store.write([
          { fence: a, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } }] },
          { fence: lost, writes: [{ page: "p2", counter: "likes", dc: "dc1", entry: { p: 2, n: 0 } }] },
          { fence: b!, writes: [{ page: "p3", counter: "likes", dc: "dc1", entry: { p: 3, n: 0 } }] },
        ]);
        expect(stale).toEqual([lost]);
        expect(await store.load("p1")).toEqual({ likes: { dc1: { p: 1, n: 0 } } });
        expect(await store.load("p2")).toEqual({});
        expect(await store.load("p3")).toEqual({ likes: { dc1: { p: 3, n: 0 } } });
      });

      test(`${name} - write rejects a malformed entry before applying anything`, async () => {
        const fence = await lease();
        const call = store.write([
          { fence, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } }] },
          { fence, writes: [{ page: "p2", counter: "likes", dc: "dc1", entry: { p: -1, n: 0 } }] },
        ]);
        await expect(call).rejects.toBeInstanceOf(InvalidStoreInputError);
        expect(await store.load("p1")).toEqual({});
      });
    });

    describe("load", () => {
      test(`${name} - load returns every counter and data center of the page`, async () => {
        const fence = await lease();
        await store.write([
          {
            fence,
            writes: [
              { page: "p1", counter: "viewers", dc: "eu-1", entry: { p: 10, n: 4 } },
              { page: "p1", counter: "viewers", dc: "us:east", entry: { p: 3, n: 3 } },
              { page: "p1", counter: "a:b.c-d_e", dc: "eu-1", entry: { p: 1, n: 0 } },
              { page: "p2", counter: "viewers", dc: "eu-1", entry: { p: 9, n: 0 } },
            ],
          },
        ]);
        await store.increment([op(fence, { counter: "likes", dc: "ap-1", delta: -1 })], KEY_TTL_MS);
        expect(await store.load("p1")).toEqual({
          viewers: { "eu-1": { p: 10, n: 4 }, "us:east": { p: 3, n: 3 } },
          "a:b.c-d_e": { "eu-1": { p: 1, n: 0 } },
          likes: { "ap-1": { p: 0, n: 1 } },
        });
        expect(await store.load("nothing-here")).toEqual({});
      });

      test(`${name} - load returns a copy the caller may change`, async () => {
        const fence = await lease();
        await store.write([
          { fence, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } }] },
        ]);
        const record = await store.load("p1");
        (record.likes!.dc1 as { p: number }).p = 99;
        delete record.likes;
        expect(await store.load("p1")).toEqual({ likes: { dc1: { p: 1, n: 0 } } });
      });
    });

    describe("listPages", () => {
      const ids = [
        "article-2",
        "article-10",
        "article-1",
        "art:*[x]\\",
        "article:[a",
        "article*",
        "b",
        "a",
        "~",
      ];

      beforeEach(async () => {
        const fence = await lease();
        const writes = ids.map((page) => ({ page, counter: "viewers", dc: "dc1", entry: { p: 1, n: 0 } }));
        await store.write([{ fence, writes }]);
      });

      async function listAll(prefix: string, limit: number): Promise<string[][]> {
        const batches: string[][] = [];
        let cursor: string | undefined;
        do {
          const page = await store.listPages(prefix, cursor, limit);
          batches.push(page.pages);
          cursor = page.cursor;
        } while (cursor !== undefined);
        return batches;
      }

      test(`${name} - listPages returns the ids under a prefix in byte order`, async () => {
        expect(await store.listPages("article", undefined, 100)).toEqual({
          pages: ["article*", "article-1", "article-10", "article-2", "article:[a"],
          cursor: undefined,
        });
        expect((await store.listPages("", undefined, 100)).pages).toEqual([...ids].sort());
        expect((await store.listPages("zzz", undefined, 100)).pages).toEqual([]);
      });

      test(`${name} - listPages pages through with a cursor`, async () => {
        expect(await listAll("article", 2)).toEqual([
          ["article*", "article-1"],
          ["article-10", "article-2"],
          ["article:[a"],
        ]);
        expect(await listAll("", 3)).toEqual([
          ["a", "art:*[x]\\", "article*"],
          ["article-1", "article-10", "article-2"],
          ["article:[a", "b", "~"],
        ]);
      });

      test(`${name} - listPages treats ':' '*' '[' and '\\' in a prefix literally`, async () => {
        expect((await store.listPages("art:*[", undefined, 10)).pages).toEqual(["art:*[x]\\"]);
        expect((await store.listPages("art:*[x]\\", undefined, 10)).pages).toEqual(["art:*[x]\\"]);
        expect((await store.listPages("article:[", undefined, 10)).pages).toEqual(["article:[a"]);
        expect((await store.listPages("article*", undefined, 10)).pages).toEqual(["article*"]);
        expect((await store.listPages("[", undefined, 10)).pages).toEqual([]);
      });

      test(`${name} - listPages stays within the prefix whatever the cursor`, async () => {
        expect((await store.listPages("article-", "a", 10)).pages).toEqual([
          "article-1",
          "article-10",
          "article-2",
        ]);
        expect((await store.listPages("article-", "article-10", 10)).pages).toEqual(["article-2"]);
        expect(await store.listPages("article-", "zzz", 10)).toEqual({ pages: [], cursor: undefined });
      });

      test(`${name} - listPages includes pages created by increments`, async () => {
        const fence = await lease();
        await store.increment([op(fence, { page: "article-0" })], KEY_TTL_MS);
        expect((await store.listPages("article-", undefined, 1)).pages).toEqual(["article-0"]);
      });

      test(`${name} - listPages rejects a limit below 1`, async () => {
        await expect(store.listPages("", undefined, 0)).rejects.toBeInstanceOf(InvalidStoreInputError);
      });
    });

    test(`${name} - calls after close reject with a StoreError`, async () => {
      await store.close();
      await expect(store.load("p1")).rejects.toBeInstanceOf(StoreError);
      await expect(store.acquire(0, "node-a", LEASE_MS)).rejects.toBeInstanceOf(StoreError);
    });
  });
}
