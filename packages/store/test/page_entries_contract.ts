/**
 * What every Store must do with the entries of pages, run inside the store contract's describe
 * block (store_contract.ts): writes max-merged under a current fence, loads of whole pages, and
 * pages listed by prefix in byte order.
 */
import { beforeEach, describe, expect, test } from "vitest";
import { InvalidStoreInputError, bucketOf, type Lease, type Store } from "@livecount/store";
import { KEY_TTL_MS, LEASE_MS, incrementOp } from "./contract_stores.js";

/** The store contract's store for the running test, on its manual clock. */
export interface StoreUnderTest {
  /** The store of the running test: opened before it, closed after it. */
  readonly store: Store;
  /** Moves the store's clock forward by `ms`. */
  advance(ms: number): void;
  /** A lease of `partition` (0 by default) for `node` ("node-a" by default). */
  lease(partition?: number, node?: string): Promise<Lease>;
}

export function describePageEntries(name: string, s: StoreUnderTest): void {
  const { advance, lease } = s;
  const op = incrementOp;

  describe("write", () => {
    test(`${name} - write max-merges each field of each entry`, async () => {
      const fence = await lease();
      await s.store.write([
        { fence, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 5, n: 1 } }] },
      ]);
      const stale = await s.store.write([
        {
          fence,
          writes: [
            { page: "p1", counter: "likes", dc: "dc1", entry: { p: 3, n: 4 } },
            { page: "p1", counter: "likes", dc: "dc2", entry: { p: 7, n: 0 } },
          ],
        },
      ]);
      expect(stale).toEqual([]);
      expect(await s.store.load("p1")).toEqual({ likes: { dc1: { p: 5, n: 4 }, dc2: { p: 7, n: 0 } } });
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
      await s.store.write([
        { fence, writes: [viewers("a:*[x", 3, 1), viewers("b", 2, 2), viewers("c", 5, 0, false)] },
        { fence: other, writes: [viewers("d", 1, 0)] },
      ]);
      expect(await s.store.nonZeroEntries(3)).toEqual([{ page: "a:*[x", counter: "@viewers", dc: "dc1" }]);
      expect(await s.store.nonZeroEntries(4)).toEqual([{ page: "d", counter: "@viewers", dc: "dc1" }]);
      // Back to zero: no longer listed. A stale fence changes nothing in the index either.
      await s.store.write([{ fence, writes: [viewers("a:*[x", 3, 3)] }]);
      expect(await s.store.nonZeroEntries(3)).toEqual([]);
      advance(LEASE_MS);
      await lease(4, "node-b");
      expect(await s.store.write([{ fence: other, writes: [viewers("d", 1, 1)] }])).toEqual([other]);
      expect(await s.store.nonZeroEntries(4)).toEqual([{ page: "d", counter: "@viewers", dc: "dc1" }]);
    });

    test(`${name} - a counter named __proto__ loads as a counter and pollutes nothing`, async () => {
      const fence = await lease();
      await s.store.write([
        { fence, writes: [{ page: "p1", counter: "__proto__", dc: "dc1", entry: { p: 4, n: 1 } }] },
      ]);
      const record = await s.store.load("p1");
      expect(Object.hasOwn(record, "__proto__")).toBe(true);
      expect(Object.getOwnPropertyDescriptor(record, "__proto__")?.value).toEqual({ dc1: { p: 4, n: 1 } });
      expect(Object.getPrototypeOf(record)).toBe(Object.prototype);
      expect(Object.hasOwn(Object.prototype, "dc1")).toBe(false);
    });

    test(`${name} - every read of whole pages keeps counters named like Object's properties`, async () => {
      const fence = await lease();
      const entry = { p: 4, n: 1 };
      const names = ["__proto__", "constructor", "toString", "hasOwnProperty"];
      await s.store.write([
        { fence, writes: names.map((counter) => ({ page: "p1", counter, dc: "dc1", entry })) },
      ]);
      const expected = Object.fromEntries(names.map((counter) => [counter, { dc1: entry }]));
      const [many] = await s.store.loadMany(["p1"]);
      const inBucket = (await s.store.bucketPages(0, [bucketOf("p1")])).get("p1")!;
      for (const record of [await s.store.load("p1"), many!, inBucket]) {
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
      await s.store.write([{ fence, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry }] }]);
      expect(await s.store.load("p1")).toEqual({ likes: { dc1: entry } });
    });

    test(`${name} - a zero entry for an absent one writes nothing`, async () => {
      const fence = await lease();
      await s.store.write([
        { fence, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 0, n: 0 } }] },
      ]);
      expect(await s.store.load("p1")).toEqual({});
      expect(await s.store.listPages("", undefined, 10)).toEqual({ pages: [], cursor: undefined });
    });

    test(`${name} - write rejects a stale fence and writes nothing of it`, async () => {
      const taken = await lease(0, "node-a");
      const released = await lease(1, "node-a");
      await s.store.release(released);
      advance(LEASE_MS);
      const current = await lease(0, "node-b");
      const w = { page: "p1", counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } };
      const inReleased = { ...w, page: "p2" };
      expect(await s.store.write([{ fence: taken, writes: [w] }])).toEqual([taken]);
      expect(await s.store.write([{ fence: released, writes: [inReleased] }])).toEqual([released]);
      expect(
        await s.store.write([{ fence: { ...current, epoch: current.epoch + 1 }, writes: [w] }]),
      ).toHaveLength(1);
      expect(await s.store.write([{ fence: taken, writes: [w] }])).toEqual([taken]);
      expect(await s.store.load("p1")).toEqual({});
      expect(await s.store.load("p2")).toEqual({});
    });

    test(`${name} - write applies every current group and returns the one stale fence`, async () => {
      const a = await lease(0, "node-a");
      const lost = await lease(1, "node-a");
      advance(LEASE_MS - 1);
      const b = await s.store.acquire(2, "node-a", LEASE_MS);
      await s.store.acquire(0, "node-a", LEASE_MS);
      advance(1); // partition 1 expires and another node takes it; 0 was re-acquired, 2 is fresh
      await lease(1, "node-b");
      const stale = await s.store.write([
        { fence: a, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } }] },
        { fence: lost, writes: [{ page: "p2", counter: "likes", dc: "dc1", entry: { p: 2, n: 0 } }] },
        { fence: b!, writes: [{ page: "p3", counter: "likes", dc: "dc1", entry: { p: 3, n: 0 } }] },
      ]);
      expect(stale).toEqual([lost]);
      expect(await s.store.load("p1")).toEqual({ likes: { dc1: { p: 1, n: 0 } } });
      expect(await s.store.load("p2")).toEqual({});
      expect(await s.store.load("p3")).toEqual({ likes: { dc1: { p: 3, n: 0 } } });
    });

    test(`${name} - write rejects a malformed entry before applying anything`, async () => {
      const fence = await lease();
      const call = s.store.write([
        { fence, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } }] },
        { fence, writes: [{ page: "p2", counter: "likes", dc: "dc1", entry: { p: -1, n: 0 } }] },
      ]);
      await expect(call).rejects.toBeInstanceOf(InvalidStoreInputError);
      expect(await s.store.load("p1")).toEqual({});
    });
  });

  describe("load", () => {
    test(`${name} - load returns every counter and data center of the page`, async () => {
      const fence = await lease();
      await s.store.write([
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
      await s.store.increment([op(fence, { counter: "likes", dc: "ap-1", delta: -1 })], KEY_TTL_MS);
      expect(await s.store.load("p1")).toEqual({
        viewers: { "eu-1": { p: 10, n: 4 }, "us:east": { p: 3, n: 3 } },
        "a:b.c-d_e": { "eu-1": { p: 1, n: 0 } },
        likes: { "ap-1": { p: 0, n: 1 } },
      });
      expect(await s.store.load("nothing-here")).toEqual({});
    });

    test(`${name} - load returns a copy the caller may change`, async () => {
      const fence = await lease();
      await s.store.write([
        { fence, writes: [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } }] },
      ]);
      const record = await s.store.load("p1");
      (record.likes!.dc1 as { p: number }).p = 99;
      delete record.likes;
      expect(await s.store.load("p1")).toEqual({ likes: { dc1: { p: 1, n: 0 } } });
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
      await s.store.write([{ fence, writes }]);
    });

    async function listAll(prefix: string, limit: number): Promise<string[][]> {
      const batches: string[][] = [];
      let cursor: string | undefined;
      do {
        const page = await s.store.listPages(prefix, cursor, limit);
        batches.push(page.pages);
        cursor = page.cursor;
      } while (cursor !== undefined);
      return batches;
    }

    test(`${name} - listPages returns the ids under a prefix in byte order`, async () => {
      expect(await s.store.listPages("article", undefined, 100)).toEqual({
        pages: ["article*", "article-1", "article-10", "article-2", "article:[a"],
        cursor: undefined,
      });
      expect((await s.store.listPages("", undefined, 100)).pages).toEqual([...ids].sort());
      expect((await s.store.listPages("zzz", undefined, 100)).pages).toEqual([]);
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
      expect((await s.store.listPages("art:*[", undefined, 10)).pages).toEqual(["art:*[x]\\"]);
      expect((await s.store.listPages("art:*[x]\\", undefined, 10)).pages).toEqual(["art:*[x]\\"]);
      expect((await s.store.listPages("article:[", undefined, 10)).pages).toEqual(["article:[a"]);
      expect((await s.store.listPages("article*", undefined, 10)).pages).toEqual(["article*"]);
      expect((await s.store.listPages("[", undefined, 10)).pages).toEqual([]);
    });

    test(`${name} - listPages stays within the prefix whatever the cursor`, async () => {
      expect((await s.store.listPages("article-", "a", 10)).pages).toEqual([
        "article-1",
        "article-10",
        "article-2",
      ]);
      expect((await s.store.listPages("article-", "article-10", 10)).pages).toEqual(["article-2"]);
      expect(await s.store.listPages("article-", "zzz", 10)).toEqual({ pages: [], cursor: undefined });
    });

    test(`${name} - listPages includes pages created by increments`, async () => {
      const fence = await lease();
      await s.store.increment([op(fence, { page: "article-0" })], KEY_TTL_MS);
      expect((await s.store.listPages("article-", undefined, 1)).pages).toEqual(["article-0"]);
    });

    test(`${name} - listPages rejects a limit below 1`, async () => {
      await expect(s.store.listPages("", undefined, 0)).rejects.toBeInstanceOf(InvalidStoreInputError);
    });
  });
}
