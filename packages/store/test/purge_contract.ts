/**
 * What every Store must do to purge tombstones (Store.purgeTombstones): which deleted counters go,
 * which stay, the purge floor, the digests and listings after, and the remains of a purged counter
 * another DC sends back. The argument for why this is safe is docs/architecture.md, "Purging
 * tombstones"; these tests pin the store's half of it.
 */
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import type { Entry } from "@livecount/crdt";
import {
  InvalidStoreInputError,
  StaleFenceError,
  ZERO_DIGEST,
  entryHash,
  pageDigest,
  xorDigest,
  type IncrementOp,
  type Lease,
  type PageRecord,
  type Store,
} from "@livecount/store";
import { pageIn, type OpenStore } from "./contract_stores.js";

const START_MS = 1_700_000_000_000;
const LEASE_MS = 60_000;
const KEY_TTL_MS = 60_000;
const PARTITION = 5;
const TOMB = "@del:likes";

/** A page id of PARTITION, distinct for each `n`. */
const pageOf = (n: number): string => pageIn(PARTITION, n);

/** The tombstone digest of what `store` holds of `pages`, computed from the definition. */
async function tombDigestOf(store: Store, pages: readonly string[]): Promise<string> {
  let d = ZERO_DIGEST;
  for (const page of pages)
    for (const [counter, dcs] of Object.entries(await store.load(page)))
      if (counter.startsWith("@del:"))
        for (const [dc, entry] of Object.entries(dcs)) d = xorDigest(d, entryHash(page, counter, dc, entry));
  return d;
}

/** The digest of what `store` holds of `pages`, computed from the definition. */
async function digestOf(store: Store, pages: readonly string[]): Promise<string> {
  let d = ZERO_DIGEST;
  for (const page of pages) d = xorDigest(d, pageDigest(page, await store.load(page)));
  return d;
}

export function describePurgeContract(name: string, open: OpenStore): void {
  describe(`${name} purge contract`, () => {
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

    function change(
      page: string,
      counter: string,
      delta: number,
      extra: Partial<IncrementOp> = {},
    ): IncrementOp {
      return { fence, page, counter, dc: "dc1", delta, key: `k${++keys}`, payload: "{}", ...extra };
    }

    /** Increments `likes` of `page` in dc1 by `value`, then deletes it as the owner would. */
    async function likedThenDeleted(
      page: string,
      value: number,
      otherDcs: Record<string, Entry> = {},
    ): Promise<void> {
      await store.increment([change(page, "likes", value)], KEY_TTL_MS);
      if (Object.keys(otherDcs).length > 0)
        await store.write([
          {
            fence,
            writes: Object.entries(otherDcs).map(([dc, entry]) => ({ page, counter: "likes", dc, entry })),
          },
        ]);
      const record = await store.load(page);
      let total = 0;
      let activity = 0;
      for (const e of Object.values(record.likes!)) {
        total += e.p - e.n;
        activity += e.p + e.n;
      }
      // The reset cancels the total in dc1's entry; the tombstone records the activity right after.
      await store.increment(
        [change(page, "likes", -total, { also: [{ counter: TOMB, delta: activity + Math.abs(total) }] })],
        KEY_TTL_MS,
      );
    }

    test(`${name} - a deleted counter whose entries are zero goes, with its tombstone, and the floor rises`, async () => {
      const page = pageOf(0);
      const other = pageOf(1);
      await likedThenDeleted(page, 3);
      await store.increment([change(page, "hearts", 2), change(other, "hearts", 1)], KEY_TTL_MS);
      nowMs += 1_000;
      const result = await store.purgeTombstones(fence, nowMs - 500, 0, 100);
      expect(result).toEqual({ purged: [{ page, counters: ["likes"] }], kept: 0, floor: 3, next: undefined });
      expect(await store.load(page)).toEqual({ hearts: { dc1: { p: 2, n: 0 } } });
      expect(await store.purgeFloor(PARTITION)).toBe(3);
      expect(await store.digests([PARTITION])).toEqual([await digestOf(store, [page, other])]);
      expect(await store.tombDigests([PARTITION])).toEqual([ZERO_DIGEST]);
      // Nothing left to look at: the page left the tombstone index.
      expect(await store.purgeTombstones(fence, nowMs, 0, 100)).toEqual({
        purged: [],
        kept: 0,
        floor: 3,
        next: undefined,
      });
    });

    test(`${name} - a settled delete counts nothing in digests, and counts again once it changes`, async () => {
      const page = pageOf(0);
      const other = pageOf(1);
      await store.increment([change(other, "hearts", 1)], KEY_TTL_MS);
      const without = await store.digests([PARTITION]);
      await likedThenDeleted(page, 3);
      // Settled: a DC that purged it and this one agree.
      expect(await store.digests([PARTITION])).toEqual(without);
      expect(await store.digests([PARTITION])).toEqual([await digestOf(store, [page, other])]);
      // Another DC's like revives it: every entry counts again.
      await store.write([{ fence, writes: [{ page, counter: "likes", dc: "dc2", entry: { p: 1, n: 0 } }] }]);
      const revived = await store.digests([PARTITION]);
      expect(revived).not.toEqual(without);
      expect(revived).toEqual([await digestOf(store, [page, other])]);
      // Deleted again from here: settled? No, two entries now; still counted, as defined.
      await store.increment([change(page, "likes", -1, { also: [{ counter: TOMB, delta: 2 }] })], KEY_TTL_MS);
      expect(await store.digests([PARTITION])).toEqual([await digestOf(store, [page, other])]);
      // The tombstone digest counts every tombstone entry, settled or not.
      await store.write([
        { fence, writes: [{ page: other, counter: TOMB, dc: "dc3", entry: { p: 4, n: 0 } }] },
      ]);
      expect(await store.tombDigests([PARTITION])).toEqual([await tombDigestOf(store, [page, other])]);
      expect(await store.tombDigests([PARTITION])).not.toEqual([ZERO_DIGEST]);
    });

    test(`${name} - a page left with nothing leaves the listing, the buckets and the digests`, async () => {
      const page = pageOf(0);
      await likedThenDeleted(page, 4);
      nowMs += 10;
      expect((await store.listPages(page, undefined, 100)).pages).toEqual([page]);
      await store.purgeTombstones(fence, nowMs, 0, 100);
      expect(await store.load(page)).toEqual({});
      expect((await store.listPages(page, undefined, 100)).pages).toEqual([]);
      expect(await store.digests([PARTITION])).toEqual([ZERO_DIGEST]);
      expect([
        ...(
          await store.bucketPages(
            PARTITION,
            Array.from({ length: 64 }, (_, b) => b),
          )
        ).keys(),
      ]).toEqual([]);
    });

    test(`${name} - tombstones that changed after the cutoff stay`, async () => {
      const page = pageOf(0);
      await likedThenDeleted(page, 1);
      const deletedAt = nowMs;
      expect(await store.countTombstonePages(PARTITION, deletedAt - 1, deletedAt)).toBe(1);
      expect(await store.countTombstonePages(PARTITION, deletedAt, deletedAt + 10)).toBe(0);
      expect((await store.purgeTombstones(fence, deletedAt - 1, 0, 100)).purged).toEqual([]);
      expect(Object.keys(await store.load(page))).toContain(TOMB);
      expect((await store.purgeTombstones(fence, deletedAt, 0, 100)).purged).toEqual([
        { page, counters: ["likes"] },
      ]);
    });

    test(`${name} - a delete that cancelled other DCs' values in its own entry stays, counted as kept`, async () => {
      const page = pageOf(0);
      // dc2 holds +4: the delete leaves dc1's entry at -7 and dc2's at +4 (with dc1's +3: zero overall).
      await likedThenDeleted(page, 3, { dc2: { p: 4, n: 0 } });
      nowMs += 10;
      const before = await store.load(page);
      expect(await store.purgeTombstones(fence, nowMs, 0, 100)).toEqual({
        purged: [],
        kept: 1,
        floor: 0,
        next: undefined,
      });
      expect(await store.load(page)).toEqual(before);
    });

    test(`${name} - a counter written in several DCs stays, even with every entry zero`, async () => {
      const page = pageOf(0);
      // dc2 went +2 and -2 on its own; the delete here saw it: both entries zero, activity 2 + 4 + 4.
      await likedThenDeleted(page, 2, { dc2: { p: 2, n: 2 } });
      nowMs += 10;
      expect((await store.load(page)).likes).toEqual({ dc1: { p: 2, n: 2 }, dc2: { p: 2, n: 2 } });
      expect(await store.purgeTombstones(fence, nowMs, 0, 100)).toMatchObject({
        purged: [],
        kept: 1,
        floor: 0,
      });
    });

    test(`${name} - a counter whose delete saw an entry this store lacks stays`, async () => {
      const page = pageOf(0);
      // Learnt from another DC: the tombstone (activity 10) came, dc3's entry it counted did not yet.
      await store.write([
        {
          fence,
          writes: [
            { page, counter: "likes", dc: "dc2", entry: { p: 3, n: 3 } },
            { page, counter: TOMB, dc: "dc2", entry: { p: 10, n: 0 } },
          ],
        },
      ]);
      nowMs += 10;
      expect(await store.purgeTombstones(fence, nowMs, 0, 100)).toMatchObject({ purged: [], kept: 1 });
    });

    test(`${name} - a counter changed since its delete is visible again and stays`, async () => {
      const page = pageOf(0);
      await likedThenDeleted(page, 2);
      await store.increment([change(page, "likes", 1), change(page, "likes", -1)], KEY_TTL_MS);
      nowMs += 10;
      const result = await store.purgeTombstones(fence, nowMs, 0, 100);
      expect(result.purged).toEqual([]);
      expect(result.kept).toBe(1);
    });

    test(`${name} - tombstones learnt from another DC count from when this store learnt them`, async () => {
      const page = pageOf(0);
      await store.write([
        {
          fence,
          writes: [
            { page, counter: "likes", dc: "dc2", entry: { p: 5, n: 5 } },
            { page, counter: TOMB, dc: "dc2", entry: { p: 10, n: 0 } },
          ],
        },
      ]);
      const learnt = nowMs;
      expect((await store.purgeTombstones(fence, learnt - 1, 0, 100)).purged).toEqual([]);
      nowMs += 5;
      expect((await store.purgeTombstones(fence, learnt, 0, 100)).purged).toEqual([
        { page, counters: ["likes"] },
      ]);
      expect(await store.purgeFloor(PARTITION)).toBe(5);
    });

    test(`${name} - pages are taken in turn, kept ones skipped by the offset`, async () => {
      const pages = [0, 1, 2, 3, 4].map((n) => pageOf(n));
      for (const [i, page] of pages.entries()) {
        nowMs += 1;
        // Pages 0 and 2 keep theirs (another DC's value was cancelled); 1, 3, 4 purge.
        await likedThenDeleted(page, 1, i % 2 === 0 && i < 4 ? { dc2: { p: 1, n: 0 } } : {});
      }
      nowMs += 10;
      const first = await store.purgeTombstones(fence, nowMs, 0, 2);
      expect(first.purged.map((p) => p.page)).toEqual([pages[1]]);
      expect(first).toMatchObject({ kept: 1, next: 1 });
      const second = await store.purgeTombstones(fence, nowMs, first.next!, 2);
      expect(second.purged.map((p) => p.page)).toEqual([pages[3]]);
      expect(second).toMatchObject({ kept: 1, next: 2 });
      const third = await store.purgeTombstones(fence, nowMs, second.next!, 2);
      expect(third.purged.map((p) => p.page)).toEqual([pages[4]]);
      expect(third.next).toBeUndefined();
    });

    test(`${name} - a peer's purge floor raises this one's, never lowers it, under the fence`, async () => {
      expect(await store.raisePurgeFloor(fence, 40)).toBe(true);
      expect(await store.raisePurgeFloor(fence, 7)).toBe(true);
      expect(await store.purgeFloor(PARTITION)).toBe(40);
      expect(await store.raisePurgeFloor({ ...fence, epoch: fence.epoch + 1 }, 90)).toBe(false);
      expect(await store.purgeFloor(PARTITION)).toBe(40);
    });

    test(`${name} - purging needs a current fence`, async () => {
      await likedThenDeleted(pageOf(0), 1);
      await expect(
        store.purgeTombstones({ ...fence, epoch: fence.epoch + 1 }, nowMs, 0, 10),
      ).rejects.toBeInstanceOf(StaleFenceError);
      await expect(store.purgeTombstones(fence, nowMs, 0, 0)).rejects.toBeInstanceOf(InvalidStoreInputError);
    });

    describe("after a purge", () => {
      const page = pageOf(0);

      beforeEach(async () => {
        await likedThenDeleted(page, 3);
        nowMs += 10;
        await store.purgeTombstones(fence, nowMs, 0, 100);
      });

      test(`${name} - an entry restarts at startAt, only when the store holds none`, async () => {
        const [fresh] = await store.increment([change(page, "likes", 1, { startAt: 6 })], KEY_TTL_MS);
        expect(fresh).toEqual({ kind: "applied", entry: { p: 7, n: 6 } });
        const [held] = await store.increment([change(page, "likes", -2, { startAt: 100 })], KEY_TTL_MS);
        expect(held).toEqual({ kind: "applied", entry: { p: 7, n: 8 } });
        await expect(
          store.increment([change(page, "likes", 1, { startAt: -1 })], KEY_TTL_MS),
        ).rejects.toBeInstanceOf(InvalidStoreInputError);
        // A change of 0 (a reset of a counter at 0) still stores the entry it reports.
        const [zero] = await store.increment([change(page, "shares", 0, { startAt: 3 })], KEY_TTL_MS);
        expect(zero).toEqual({ kind: "applied", entry: { p: 3, n: 3 } });
        expect((await store.load(page)).shares).toEqual({ dc1: { p: 3, n: 3 } });
      });

      test(`${name} - another DC's copy of the purged counter is left out of a merge`, async () => {
        // What a DC that has not purged yet still holds: zero entries and the tombstone (activity 6).
        const remains: PageRecord = {
          likes: { dc1: { p: 3, n: 3 } },
          [TOMB]: { dc1: { p: 6, n: 0 } },
          hearts: { dc2: { p: 1, n: 0 } },
        };
        const digest = await store.digests([PARTITION]);
        const advanced = await store.mergePages(fence, new Map([[page, remains]]), "dc1");
        expect(advanced).toEqual(new Map([[page, { hearts: { dc2: { p: 1, n: 0 } } }]]));
        expect(await store.load(page)).toEqual({ hearts: { dc2: { p: 1, n: 0 } } });
        expect(digest).not.toEqual(await store.digests([PARTITION]));
      });

      test(`${name} - a copy changed since the delete, or deleted later, is merged`, async () => {
        const revived: PageRecord = {
          likes: { dc1: { p: 3, n: 3 }, dc2: { p: 1, n: 0 } },
          [TOMB]: { dc1: { p: 6, n: 0 } },
        };
        await store.mergePages(fence, new Map([[page, revived]]), "dc1");
        expect((await store.load(page)).likes).toEqual({ dc1: { p: 3, n: 3 }, dc2: { p: 1, n: 0 } });
        // An entry above the floor (floor 3 here) is news, not remains.
        const other = pageOf(1);
        const later: PageRecord = { likes: { dc2: { p: 4, n: 4 } }, [TOMB]: { dc2: { p: 8, n: 0 } } };
        await store.mergePages(fence, new Map([[other, later]]), "dc1");
        expect(await store.load(other)).toEqual(later);
      });
    });
  });
}
