/**
 * What every Store must do for convergence across data centers: digests kept current with the
 * entries (the same digests in both implementations, computed as digest.ts says), pages by bucket,
 * the bootstrap mark, and a restarted process reclaiming its previous incarnation's leases. Pages
 * whose presence emptied are in empty_pages_contract.ts, run in the same describe block.
 */
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import type { Entry } from "@livecount/crdt";
import {
  DIGEST_BUCKETS,
  ZERO_DIGEST,
  bucketOf,
  entryHash,
  xorDigest,
  type Lease,
  type PageRecord,
  type Store,
} from "@livecount/store";
import { mulberry32, testSeed } from "../../../test/support/prng.js";
import { KEY_TTL_MS, LEASE_MS, START_MS, pageIn, type OpenStore } from "./contract_stores.js";
import { describeEmptyPages } from "./empty_pages_contract.js";

/** The digest of a set of records, computed from the definition, not by any store. */
export function expectedDigest(records: ReadonlyMap<string, PageRecord>, bucket?: number): string {
  let d = ZERO_DIGEST;
  for (const [page, record] of records) {
    if (bucket !== undefined && bucketOf(page) !== bucket) continue;
    for (const [counter, dcs] of Object.entries(record))
      for (const [dc, entry] of Object.entries(dcs)) d = xorDigest(d, entryHash(page, counter, dc, entry));
  }
  return d;
}

export function describeConvergenceContract(name: string, open: OpenStore): void {
  describe(`${name} convergence contract`, () => {
    let stores: Store[];
    let nowMs: number;

    beforeEach(() => {
      nowMs = START_MS;
      stores = [];
    });
    afterEach(async () => {
      await Promise.all(stores.map((s) => s.close()));
    });

    async function fresh(): Promise<Store> {
      const store = await open(() => nowMs);
      stores.push(store);
      return store;
    }

    async function lease(store: Store, partition: number, node = "node-a"): Promise<Lease> {
      const l = await store.acquire(partition, node, LEASE_MS);
      if (l === null) throw new Error(`partition ${partition} is held`);
      return l;
    }

    test(`${name} - an empty partition has zero digests everywhere`, async () => {
      const store = await fresh();
      expect(await store.digests([0, 5])).toEqual([ZERO_DIGEST, ZERO_DIGEST]);
      const buckets = await store.bucketDigests(5);
      expect(buckets).toHaveLength(DIGEST_BUCKETS);
      expect(new Set(buckets)).toEqual(new Set([ZERO_DIGEST]));
    });

    test(`${name} - digests follow the entries exactly as defined, whichever way they were written`, async () => {
      const seed = testSeed(`${name} digests`);
      const rnd = mulberry32(seed);
      const [a, b] = [await fresh(), await fresh()];
      const fa = await lease(a, 3);
      const fb = await lease(b, 3);
      const pages = Array.from({ length: 12 }, (_, i) => pageIn(3, i));
      /** What both stores must end up holding. */
      const truth = new Map<string, PageRecord>();
      const writes: Array<{ page: string; counter: string; dc: string; entry: Entry }> = [];
      for (let i = 0; i < 80; i++) {
        const page = rnd.pick(pages);
        const counter = rnd.pick(["likes", "@viewers", "hearts"]);
        const dc = rnd.pick(["dc1", "dc2", "dc3"]);
        const entry = { p: rnd.int(50), n: rnd.int(50) };
        writes.push({ page, counter, dc, entry });
        const record = (truth.get(page) ?? {}) as Record<string, Record<string, Entry>>;
        const held = record[counter]?.[dc] ?? { p: 0, n: 0 };
        const merged = { p: Math.max(held.p, entry.p), n: Math.max(held.n, entry.n) };
        if (merged.p > 0 || merged.n > 0) record[counter] = { ...record[counter], [dc]: merged };
        truth.set(page, record);
      }
      // Store a gets them one by one in order; store b in one call, reversed (max-merge commutes).
      for (const w of writes) await a.write([{ fence: fa, writes: [w] }]);
      await b.write([{ fence: fb, writes: [...writes].reverse() }]);
      for (const page of truth.keys()) if (Object.keys(truth.get(page)!).length === 0) truth.delete(page);
      const [da] = await a.digests([3]);
      expect(da, `seed ${seed}`).toBe(expectedDigest(truth));
      expect(await b.digests([3]), `seed ${seed}`).toEqual([da]);
      const buckets = await a.bucketDigests(3);
      expect(await b.bucketDigests(3)).toEqual(buckets);
      buckets.forEach((d, bucket) => expect(d, `bucket ${bucket}`).toBe(expectedDigest(truth, bucket)));
      expect(buckets.reduce(xorDigest, ZERO_DIGEST)).toBe(da);
    });

    test(`${name} - increments keep the digest of the page's bucket and partition current`, async () => {
      const store = await fresh();
      const fence = await lease(store, 2);
      const page = pageIn(2, 0);
      const base = { fence, page, counter: "likes", dc: "dc1", payload: "x" } as const;
      await store.increment([{ ...base, delta: 3, key: "k1" }], KEY_TTL_MS);
      await store.increment(
        [{ ...base, delta: -1, key: "k2", also: [{ counter: "@del:likes", delta: 4 }] }],
        KEY_TTL_MS,
      );
      const truth = new Map([[page, await store.load(page)]]);
      expect(truth.get(page)).toEqual({
        likes: { dc1: { p: 3, n: 1 } },
        "@del:likes": { dc1: { p: 4, n: 0 } },
      });
      expect(await store.digests([2])).toEqual([expectedDigest(truth)]);
      expect((await store.bucketDigests(2))[bucketOf(page)]).toBe(expectedDigest(truth));
    });

    test(`${name} - a write that advances nothing, or under a stale fence, leaves the digests alone`, async () => {
      const store = await fresh();
      const fence = await lease(store, 1);
      const page = pageIn(1, 0);
      await store.write([{ fence, writes: [{ page, counter: "likes", dc: "dc2", entry: { p: 5, n: 2 } }] }]);
      const [before] = await store.digests([1]);
      await store.write([{ fence, writes: [{ page, counter: "likes", dc: "dc2", entry: { p: 4, n: 2 } }] }]);
      await store.write([
        {
          fence: { ...fence, epoch: fence.epoch + 7 },
          writes: [{ page, counter: "x", dc: "dc2", entry: { p: 9, n: 0 } }],
        },
      ]);
      expect(await store.digests([1])).toEqual([before]);
    });

    test(`${name} - bucketPages returns every page of the asked buckets with its entries, and only those`, async () => {
      const store = await fresh();
      const fence = await lease(store, 4);
      const pages = Array.from({ length: 30 }, (_, i) => pageIn(4, i));
      await store.write([
        {
          fence,
          writes: pages.map((page, i) => ({ page, counter: "likes", dc: "dc1", entry: { p: i + 1, n: 0 } })),
        },
      ]);
      const wanted = [bucketOf(pages[0]!), bucketOf(pages[7]!)];
      const got = await store.bucketPages(4, wanted);
      const expected = pages.filter((p) => wanted.includes(bucketOf(p)));
      expect([...got.keys()].sort()).toEqual(expected.sort());
      expect(got.get(pages[7]!)).toEqual({ likes: { dc1: { p: 8, n: 0 } } });
      expect(await store.bucketPages(4, [])).toEqual(new Map());
      expect(await store.loadMany([pages[0]!, "absent"])).toEqual([{ likes: { dc1: { p: 1, n: 0 } } }, {}]);
    });

    test(`${name} - loadMany reads hundreds of pages in the order asked, absent ones empty, several counters and DCs each`, async () => {
      const store = await fresh();
      const fence = await lease(store, 5);
      const pages = Array.from({ length: 700 }, (_, i) => pageIn(5, i));
      await store.write([
        {
          fence,
          writes: pages.flatMap((page, i) => [
            { page, counter: "likes", dc: "dc1", entry: { p: i + 1, n: 0 } },
            { page, counter: "likes", dc: "dc2", entry: { p: 1, n: i } },
            { page, counter: "reactions:fire", dc: "dc1", entry: { p: 2, n: 1 } },
          ]),
        },
      ]);
      const asked = [...pages].reverse();
      asked.splice(300, 0, "absent-1");
      asked.push("absent-2");
      const records = await store.loadMany(asked);
      expect(records).toHaveLength(asked.length);
      asked.forEach((page, i) => {
        const n = pages.indexOf(page);
        expect(records[i], page).toEqual(
          n < 0
            ? {}
            : {
                likes: { dc1: { p: n + 1, n: 0 }, dc2: { p: 1, n } },
                "reactions:fire": { dc1: { p: 2, n: 1 } },
              },
        );
      });
    });

    test(`${name} - mergePages writes what advances, returns it as stored, and ends with the digests of write()`, async () => {
      const seed = testSeed(`${name} mergePages`);
      const rnd = mulberry32(seed);
      const [a, b] = [await fresh(), await fresh()];
      const fa = await lease(a, 7);
      const fb = await lease(b, 7);
      // More pages than one script call takes, each with what this DC held before and what arrives.
      const pages = Array.from({ length: 260 }, (_, i) => pageIn(7, i));
      const counters = ["likes", "@viewers", "@connections", "@del:likes", "__proto__"];
      const random = (): PageRecord => {
        const record: Record<string, Record<string, Entry>> = {};
        for (const counter of counters) {
          for (const dc of ["dc1", "dc2"]) {
            if (rnd.int(3) === 0) continue;
            // fromEntries-like own properties: "__proto__" stays a counter.
            Object.defineProperty(record, counter, {
              value: {
                ...(Object.hasOwn(record, counter) ? record[counter] : {}),
                [dc]: { p: rnd.int(9) + 1, n: rnd.int(5) },
              },
              enumerable: true,
              writable: true,
              configurable: true,
            });
          }
        }
        return record;
      };
      const held = new Map(pages.map((page) => [page, random()]));
      const incoming = new Map(pages.map((page) => [page, random()]));
      const writesOf = (records: ReadonlyMap<string, PageRecord>) =>
        [...records].flatMap(([page, record]) =>
          Object.entries(record).flatMap(([counter, dcs]) =>
            Object.entries(dcs).map(([dc, entry]) => ({ page, counter, dc, entry })),
          ),
        );
      for (const store of [a, b]) {
        await store.write([{ fence: store === a ? fa : fb, writes: writesOf(held) }]);
      }
      const advanced = await a.mergePages(fa, incoming, "dc1");
      await b.write([
        {
          fence: fb,
          writes: writesOf(incoming).map((w) => ({
            ...w,
            // Every presence entry of the indexed DC is indexed, and none other.
            indexed: (w.counter === "@viewers" || w.counter === "@connections") && w.dc === "dc1",
          })),
        },
      ]);
      expect(advanced, `seed ${seed}`).not.toBeNull();
      // Both stores hold the max of every entry, with the same digests and indexes.
      expect(await a.loadMany(pages)).toEqual(await b.loadMany(pages));
      expect(await a.digests([7])).toEqual(await b.digests([7]));
      expect(await a.bucketDigests(7)).toEqual(await b.bucketDigests(7));
      expect(await a.presenceFloor(7)).toBe(await b.presenceFloor(7));
      const refs = (s: Store) => s.nonZeroEntries(7).then((r) => r.map((x) => JSON.stringify(x)).sort());
      expect(await refs(a)).toEqual(await refs(b));
      // Returned: exactly the entries that advanced, as stored now.
      const stored = await a.loadMany(pages);
      pages.forEach((page, i) => {
        const before = held.get(page)!;
        const expected: Record<string, Record<string, Entry>> = {};
        for (const [counter, dcs] of Object.entries(incoming.get(page)!)) {
          for (const [dc, entry] of Object.entries(dcs)) {
            const old = Object.hasOwn(before, counter) ? before[counter]![dc] : undefined;
            if (old !== undefined && old.p >= entry.p && old.n >= entry.n) continue;
            Object.defineProperty(expected, counter, {
              value: {
                ...(Object.hasOwn(expected, counter) ? expected[counter] : {}),
                [dc]: stored[i]![counter]![dc],
              },
              enumerable: true,
              writable: true,
              configurable: true,
            });
          }
        }
        const got = advanced!.get(page);
        if (Object.keys(expected).length === 0) expect(got, `${page}, seed ${seed}`).toBeUndefined();
        else expect({ ...got }, `${page}, seed ${seed}`).toEqual(expected);
      });
      // Merged again, nothing advances.
      expect((await a.mergePages(fa, incoming, "dc1"))!.size).toBe(0);
    });

    test(`${name} - mergePages leaves out a page it does not hold that brings only zero presence, and refuses a stale fence`, async () => {
      const store = await fresh();
      const fence = await lease(store, 8);
      const [absent, held, fresh1] = [pageIn(8, 0), pageIn(8, 1), pageIn(8, 2)];
      await store.write([
        { fence, writes: [{ page: held, counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } }] },
      ]);
      const before = await store.digests([8]);
      const zero = { "@viewers": { dc2: { p: 4, n: 4 } } };
      const advanced = await store.mergePages(
        fence,
        new Map<string, PageRecord>([
          [absent, zero],
          [held, zero],
          [fresh1, { "@viewers": { dc2: { p: 3, n: 1 } } }],
        ]),
        "dc1",
      );
      expect([...advanced!.keys()].sort()).toEqual([held, fresh1].sort());
      expect(await store.load(absent)).toEqual({});
      expect((await store.listPages("", undefined, 10)).pages).not.toContain(absent);
      expect(await store.load(held)).toEqual({
        likes: { dc1: { p: 1, n: 0 } },
        "@viewers": { dc2: { p: 4, n: 4 } },
      });
      // Zero presence adds nothing to a digest; the non-zero entry does.
      expect(await store.digests([8])).not.toEqual(before);
      const stale = { ...fence, epoch: fence.epoch + 1 };
      const likes = new Map<string, PageRecord>([[absent, { likes: { dc2: { p: 5, n: 0 } } }]]);
      expect(await store.mergePages(stale, likes, "dc1")).toBeNull();
      expect(await store.load(absent)).toEqual({});
      await expect(
        store.mergePages(fence, new Map([[absent, { likes: { dc2: { p: -1, n: 0.5 } } }]]), "dc1"),
      ).rejects.toThrow();
    });

    test(`${name} - the bootstrap mark is set only under a current fence and stays`, async () => {
      const store = await fresh();
      expect(await store.isBootstrapped(6)).toBe(false);
      const fence = await lease(store, 6);
      expect(await store.markBootstrapped({ ...fence, epoch: fence.epoch + 1 })).toBe(false);
      expect(await store.isBootstrapped(6)).toBe(false);
      expect(await store.markBootstrapped(fence)).toBe(true);
      expect(await store.isBootstrapped(6)).toBe(true);
      expect(await store.isBootstrapped(7)).toBe(false);
    });

    test(`${name} - a restarted process reclaims its previous incarnation's live leases with a new epoch`, async () => {
      const store = await fresh();
      const old = await lease(store, 8, "counter-1/incarnation-a");
      expect(await store.acquire(8, "counter-1/incarnation-b", LEASE_MS)).toBeNull();
      expect(await store.acquire(8, "counter-2/x", LEASE_MS, { reclaimFrom: "counter-2/" })).toBeNull();
      const reclaimed = await store.acquire(8, "counter-1/incarnation-b", LEASE_MS, {
        reclaimFrom: "counter-1/",
      });
      expect(reclaimed).toMatchObject({
        partition: 8,
        node: "counter-1/incarnation-b",
        epoch: old.epoch + 1,
      });
      // The old incarnation is fenced off: its renewals and writes are refused.
      expect(await store.renew([old], LEASE_MS)).toEqual([]);
      const stale = await store.write([
        { fence: old, writes: [{ page: pageIn(8, 0), counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } }] },
      ]);
      expect(stale).toEqual([old]);
      // A prefix is not a substring: "counter-1" does not reclaim from "counter-10/…".
      await lease(store, 9, "counter-10/a");
      expect(await store.acquire(9, "counter-1/c", LEASE_MS, { reclaimFrom: "counter-1/" })).toBeNull();
    });

    test(`${name} - a zero presence entry adds nothing to a digest; a non-zero one does`, async () => {
      const store = await fresh();
      const fence = await lease(store, 10);
      const page = pageIn(10, 0);
      const write = (entry: { p: number; n: number }) =>
        store.write([{ fence, writes: [{ page, counter: "@viewers", dc: "dc2", entry }] }]);
      await write({ p: 3, n: 3 });
      expect(await store.digests([10])).toEqual([ZERO_DIGEST]);
      await write({ p: 4, n: 3 });
      expect(await store.digests([10])).not.toEqual([ZERO_DIGEST]);
      await write({ p: 4, n: 4 });
      expect(await store.digests([10])).toEqual([ZERO_DIGEST]);
    });

    describeEmptyPages(name, {
      fresh,
      lease,
      get nowMs() {
        return nowMs;
      },
      advance: (ms) => {
        nowMs += ms;
      },
    });
  });
}
