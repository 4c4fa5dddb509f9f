/**
 * What every Store must do for time-windowed counters: a window bucket (`@w:<counter>:<minute>`)
 * changes atomically with its counter under the increment's key, counts in digests like any entry,
 * and once no window reaches it, is removed (digests, listings and empty pages kept right) and never
 * comes back through a write or a merge.
 */
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import {
  DIGEST_BUCKETS,
  StaleFenceError,
  ZERO_DIGEST,
  pageDigest,
  xorDigest,
  type IncrementOp,
  type Lease,
  type Store,
} from "@livecount/store";
import { pageIn, type OpenStore } from "./contract_stores.js";

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;
/** A whole minute, so bucket boundaries are easy to read. */
const START_MS = 28_000_000 * MINUTE_MS;
const START_MINUTE = START_MS / MINUTE_MS;
const LEASE_MS = 10 * DAY_MS;
const KEY_TTL_MS = 60_000;
const PARTITION = 9;

const bucket = (counter: string, minute: number): string => `@w:${counter}:${minute}`;

async function digestOf(store: Store, pages: readonly string[]): Promise<string> {
  let d = ZERO_DIGEST;
  for (const page of pages) d = xorDigest(d, pageDigest(page, await store.load(page)));
  return d;
}

export function describeWindowContract(name: string, open: OpenStore): void {
  describe(`${name} window contract`, () => {
    let store: Store;
    let fence: Lease;
    let nowMs: number;
    let keys = 0;

    beforeEach(async () => {
      nowMs = START_MS;
      store = await open(() => nowMs);
      const l = await store.acquire(PARTITION, "node-a", LEASE_MS);
      if (l === null) throw new Error("partition held");
      fence = l;
    });
    afterEach(async () => {
      await store.close();
    });

    /** An increment of `counter` by `delta` in dc1 that also adds it to the bucket of `minute`. */
    function increment(page: string, counter: string, delta: number, minute: number): IncrementOp {
      return {
        fence,
        page,
        counter,
        dc: "dc1",
        delta,
        key: `k${++keys}`,
        payload: "{}",
        also: [{ counter: bucket(counter, minute), delta }],
      };
    }

    test(`${name} - a bucket changes with its counter, once per key, and counts in the digest`, async () => {
      const page = pageIn(PARTITION, 1);
      const first = increment(page, "likes", 3, START_MINUTE);
      const [applied] = await store.increment([first], KEY_TTL_MS);
      expect(applied).toEqual({ kind: "applied", entry: { p: 3, n: 0 }, also: [{ p: 3, n: 0 }] });
      const [down] = await store.increment([increment(page, "likes", -1, START_MINUTE)], KEY_TTL_MS);
      expect(down).toMatchObject({ also: [{ p: 3, n: 1 }] });
      // A retry under the same key counts neither.
      expect((await store.increment([first], KEY_TTL_MS))[0]!.kind).toBe("duplicate");
      expect(
        await store.loadEntries(page, [
          { counter: bucket("likes", START_MINUTE), dc: "dc1" },
          { counter: "likes", dc: "dc1" },
          { counter: bucket("likes", START_MINUTE - 1), dc: "dc1" },
        ]),
      ).toEqual([{ p: 3, n: 1 }, { p: 3, n: 1 }, undefined]);
      expect((await store.digests([PARTITION]))[0]).toBe(await digestOf(store, [page]));
    });

    test(`${name} - expired buckets go, with their digest, and the rest stays`, async () => {
      const page = pageIn(PARTITION, 2);
      const other = pageIn(PARTITION, 3);
      await store.increment(
        [
          increment(page, "likes", 1, START_MINUTE),
          increment(page, "likes", 2, START_MINUTE + 1),
          increment(other, "claps", 5, START_MINUTE),
        ],
        KEY_TTL_MS,
      );
      await store.write([
        {
          fence,
          writes: [{ page, counter: bucket("likes", START_MINUTE), dc: "dc2", entry: { p: 7, n: 0 } }],
        },
      ]);
      // Until a day after its minute ends, a bucket stays.
      nowMs = (START_MINUTE + 1) * MINUTE_MS + DAY_MS - 1;
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(0);
      nowMs += 1;
      // At the limit: two of the three entries of START_MINUTE.
      expect(await store.removeExpiredBuckets(fence, 2)).toBe(2);
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(1);
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(0);
      const record = await store.load(page);
      expect(Object.keys(record).sort()).toEqual([bucket("likes", START_MINUTE + 1), "likes"]);
      expect(Object.keys(await store.load(other))).toEqual(["claps"]);
      expect((await store.digests([PARTITION]))[0]).toBe(await digestOf(store, [page, other]));
      nowMs += MINUTE_MS;
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(1);
      expect(await store.load(page)).toEqual({ likes: { dc1: { p: 3, n: 0 } } });
      expect((await store.digests([PARTITION]))[0]).toBe(await digestOf(store, [page, other]));
    });

    test(`${name} - an expired bucket is left out of writes and merges, so nothing brings it back`, async () => {
      const page = pageIn(PARTITION, 4);
      await store.increment([increment(page, "likes", 1, START_MINUTE)], KEY_TTL_MS);
      nowMs = (START_MINUTE + 1) * MINUTE_MS + DAY_MS;
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(1);
      const old = { [bucket("likes", START_MINUTE)]: { dc2: { p: 4, n: 0 } } };
      expect(await store.mergePages(fence, new Map([[page, old]]), "dc1")).toEqual(new Map());
      await store.write([
        {
          fence,
          writes: [{ page, counter: bucket("likes", START_MINUTE), dc: "dc1", entry: { p: 1, n: 0 } }],
        },
      ]);
      expect(await store.load(page)).toEqual({ likes: { dc1: { p: 1, n: 0 } } });
      // A bucket still in reach merges like any entry.
      const recent = { [bucket("likes", START_MINUTE + 2)]: { dc2: { p: 4, n: 1 } } };
      expect(await store.mergePages(fence, new Map([[page, recent]]), "dc1")).toEqual(
        new Map([[page, recent]]),
      );
      expect((await store.digests([PARTITION]))[0]).toBe(await digestOf(store, [page]));
    });

    test(`${name} - a page left with nothing but its expired buckets goes from the listing; one with zero presence becomes empty`, async () => {
      const gone = pageIn(PARTITION, 5);
      const empty = pageIn(PARTITION, 6);
      await store.write([
        {
          fence,
          writes: [
            { page: gone, counter: bucket("likes", START_MINUTE), dc: "dc2", entry: { p: 2, n: 0 } },
            { page: empty, counter: bucket("likes", START_MINUTE), dc: "dc2", entry: { p: 2, n: 0 } },
            { page: empty, counter: "@viewers", dc: "dc1", entry: { p: 3, n: 3 }, indexed: true },
          ],
        },
      ]);
      expect((await store.listPages("", undefined, 100)).pages.sort()).toEqual([empty, gone].sort());
      expect(await store.removeEmptyPages(fence, nowMs, 100)).toEqual([]);
      nowMs = (START_MINUTE + 1) * MINUTE_MS + DAY_MS;
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(2);
      expect((await store.listPages("", undefined, 100)).pages).toEqual([empty]);
      expect(await store.bucketPages(PARTITION, [...Array(DIGEST_BUCKETS).keys()])).toEqual(
        new Map([[empty, { "@viewers": { dc1: { p: 3, n: 3 } } }]]),
      );
      expect(await store.removeEmptyPages(fence, nowMs, 100)).toEqual([empty]);
      expect((await store.digests([PARTITION]))[0]).toBe(ZERO_DIGEST);
    });

    test(`${name} - removing buckets needs a current fence`, async () => {
      const page = pageIn(PARTITION, 7);
      await store.increment([increment(page, "likes", 1, START_MINUTE)], KEY_TTL_MS);
      nowMs = (START_MINUTE + 1) * MINUTE_MS + DAY_MS;
      await expect(store.removeExpiredBuckets({ ...fence, epoch: fence.epoch + 1 }, 100)).rejects.toThrow(
        StaleFenceError,
      );
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(1);
    });

    test(`${name} - unique-visitor registers and peaks expire on their own schedules; loadPrefixed reads them alone`, async () => {
      const page = pageIn(PARTITION, 8);
      const day = Math.floor(START_MS / DAY_MS);
      const hour = Math.floor(START_MS / 3_600_000);
      const writes = [
        { counter: `@u:${day}:17`, dc: "dc1", entry: { p: 5, n: 0 } },
        { counter: `@u:${day}:4095`, dc: "dc2", entry: { p: 2, n: 0 } },
        { counter: `@pm:${START_MINUTE}`, dc: "dc1", entry: { p: 40, n: 0 } },
        { counter: `@ph:${hour}`, dc: "dc1", entry: { p: 40, n: 0 } },
        { counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } },
      ].map((w) => ({ page, ...w }));
      await store.write([{ fence, writes }]);
      expect(await store.loadPrefixed(page, ["@u:"])).toEqual({
        [`@u:${day}:17`]: { dc1: { p: 5, n: 0 } },
        [`@u:${day}:4095`]: { dc2: { p: 2, n: 0 } },
      });
      expect(Object.keys(await store.loadPrefixed(page, ["@pm:", "@ph:"])).sort()).toEqual(
        [`@ph:${hour}`, `@pm:${START_MINUTE}`].sort(),
      );
      expect(await store.loadPrefixed(page, [])).toEqual({});
      // A minute's peak goes an hour after its minute; an hour's a day after its hour.
      nowMs = (START_MINUTE + 1) * MINUTE_MS + 3_600_000;
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(1);
      nowMs = (hour + 1) * 3_600_000 + DAY_MS;
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(1);
      // Registers are read for their day and the next: they go two days after their day began.
      nowMs = (day + 2) * DAY_MS - 1;
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(0);
      nowMs += 1;
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(2);
      expect(await store.load(page)).toEqual({ likes: { dc1: { p: 1, n: 0 } } });
      expect((await store.digests([PARTITION]))[0]).toBe(await digestOf(store, [page]));
    });

    test(`${name} - registers written by the thousand, raised, lowered, repeated and expired in one write are stored as if written one by one`, async () => {
      const page = pageIn(PARTITION, 11);
      const day = Math.floor(START_MS / DAY_MS);
      const reg = (i: number, d = day): string => `@u:${d}:${i}`;
      const expected = new Map<string, number>();
      const write = async (entries: Array<[string, number]>): Promise<void> => {
        for (const [counter, p] of entries) {
          if (!counter.startsWith(`@u:${day}:`)) continue; // an expired day's: left out
          expected.set(counter, Math.max(p, expected.get(counter) ?? 0));
        }
        const writes = entries.map(([counter, p]) => ({ page, counter, dc: "dc1", entry: { p, n: 0 } }));
        await store.write([{ fence, writes }]);
      };
      // More registers than a script merges per call, an expired day's, and two written twice.
      await write([
        ...Array.from({ length: 1_200 }, (_, i): [string, number] => [reg(i), 1 + (i % 5)]),
        [reg(3, day - 2), 4],
        [reg(7), 3],
        [reg(7), 9],
        [reg(8), 9],
        [reg(8), 3],
      ]);
      // Half raised, some lower than stored, some new.
      await write([
        ...Array.from({ length: 600 }, (_, i): [string, number] => [reg(2 * i), 2 + (i % 5)]),
        ...Array.from({ length: 100 }, (_, i): [string, number] => [reg(2 * i + 1), 1]),
        ...Array.from({ length: 50 }, (_, i): [string, number] => [reg(3_000 + i), 7]),
      ]);
      // Names that only look like registers, and a register asked to be indexed, take the ordinary path.
      await store.write([
        {
          fence,
          writes: [
            { page, counter: "@u:x", dc: "dc1", entry: { p: 4, n: 0 } },
            { page, counter: "@u:5", dc: "dc1", entry: { p: 4, n: 0 } },
          ],
        },
      ]);
      await store.write([
        { fence, writes: [{ page, counter: reg(9), dc: "dc1", entry: { p: 8, n: 0 }, indexed: true }] },
      ]);
      expected.set(reg(9), 8);
      const { "@u:x": odd, "@u:5": odder, ...stored } = await store.loadPrefixed(page, ["@u:"]);
      expect([odd, odder]).toEqual([{ dc1: { p: 4, n: 0 } }, { dc1: { p: 4, n: 0 } }]);
      expect((await store.digests([PARTITION]))[0]).toBe(await digestOf(store, [page]));
      expect(Object.keys(stored)).toHaveLength(expected.size);
      for (const [counter, p] of expected) expect(stored[counter]).toEqual({ dc1: { p, n: 0 } });
      expect((await store.digests([PARTITION]))[0]).toBe(await digestOf(store, [page]));
      expect((await store.listPages(page, undefined, 10)).pages).toContain(page);
      // Every one of them expires with its day.
      nowMs = (day + 2) * DAY_MS;
      let removed = 0;
      for (let n; (n = await store.removeExpiredBuckets(fence, 500)) > 0;) removed += n;
      expect(removed).toBe(expected.size);
      expect(Object.keys(await store.load(page)).sort()).toEqual(["@u:5", "@u:x"]);
    });

    test(`${name} - a page with nothing but zero presence and visit records is empty: it goes with them, and they do not bring it back`, async () => {
      const page = pageIn(PARTITION, 9);
      const day = Math.floor(START_MS / DAY_MS);
      const visits = {
        [`@u:${day}:3`]: { dc1: { p: 4, n: 0 }, dc2: { p: 6, n: 0 } },
        [`@pm:${START_MINUTE}`]: { dc1: { p: 2, n: 0 } },
      };
      await store.write([
        {
          fence,
          writes: [
            { page, counter: "@viewers", dc: "dc1", entry: { p: 2, n: 2 }, indexed: true },
            ...Object.entries(visits).flatMap(([counter, dcs]) =>
              Object.entries(dcs).map(([dc, entry]) => ({ page, counter, dc, entry })),
            ),
          ],
        },
      ]);
      expect((await store.digests([PARTITION]))[0]).not.toBe(ZERO_DIGEST);
      nowMs += 1000;
      expect(await store.removeEmptyPages(fence, nowMs, 100)).toEqual([page]);
      expect(await store.load(page)).toEqual({});
      expect((await store.digests([PARTITION]))[0]).toBe(ZERO_DIGEST);
      expect((await store.listPages("", undefined, 100)).pages).not.toContain(page);
      // Another DC's copy of the empty page (it has not removed it yet) stays out.
      const copy = { ...visits, "@viewers": { dc2: { p: 5, n: 5 } } };
      expect(await store.mergePages(fence, new Map([[page, copy]]), "dc1")).toEqual(new Map());
      expect(await store.load(page)).toEqual({});
      // Nothing is left to expire later either.
      nowMs = (day + 3) * DAY_MS;
      expect(await store.removeExpiredBuckets(fence, 100)).toBe(0);
      // A page with viewers keeps its visit records.
      const live = pageIn(PARTITION, 10);
      await store.write([
        {
          fence,
          writes: [
            { page: live, counter: "@viewers", dc: "dc1", entry: { p: 1, n: 0 }, indexed: true },
            { page: live, counter: `@u:${day + 3}:3`, dc: "dc1", entry: { p: 4, n: 0 } },
          ],
        },
      ]);
      expect(await store.removeEmptyPages(fence, nowMs + 1000, 100)).toEqual([]);
    });

    test(`${name} - an increment op that stores nothing (a reset of a counter at 0) leaves an empty page empty`, async () => {
      const page = pageIn(PARTITION, 11);
      await store.write([
        { fence, writes: [{ page, counter: "@viewers", dc: "dc1", entry: { p: 1, n: 1 }, indexed: true }] },
      ]);
      const [outcome] = await store.increment(
        [
          {
            fence,
            page,
            counter: "unread",
            dc: "dc1",
            delta: 0,
            key: "reset-0",
            payload: "{}",
            also: [{ counter: "@del:unread", delta: 0 }],
          },
        ],
        KEY_TTL_MS,
      );
      expect(outcome).toMatchObject({ kind: "applied", entry: { p: 0, n: 0 } });
      nowMs += 1000;
      expect(await store.removeEmptyPages(fence, nowMs, 100)).toEqual([page]);
    });
  });
}
