/**
 * The embedded default store: everything in process memory, lost on exit. Same semantics as the
 * Redis store, call for call; every call runs to completion before the next, so each is atomic.
 */
import type { Entry } from "@livecount/crdt";
import { bucketExpiresAt, isVisitRecord } from "./digest.js";
import {
  OWN_VALUE,
  StaleFenceError,
  StoreError,
  type AcquireOptions,
  type BusNote,
  type CounterRef,
  type EntryRef,
  type Fence,
  type KeyRestore,
  type FencedWrites,
  type IncrementOp,
  type IncrementOutcome,
  type Lease,
  type PageList,
  type PageRecord,
  type PurgeResult,
  type Store,
  type EntryWrite,
} from "./store.js";
import { RecordsBuilder, isTombstone, onlyZeroPresence, pageWrites, purgedRemains } from "./page_merge.js";
import { MemoryDigests, type PageEntries } from "./memory_digests.js";
import { EmptyPages, isEmpty } from "./memory_empty_pages.js";
import { MemoryKeys, answerSeen, keyRecord } from "./memory_keys.js";
import { SortedPageIds } from "./memory_page_ids.js";
import { MemoryLeases } from "./memory_leases.js";
import { BucketIndex } from "./memory_buckets.js";
import { NonZeroIndex } from "./memory_nonzero.js";
import { purgeSettled } from "./memory_purge.js";
import { changesFit, entriesOf, opRefs, recordOf } from "./memory_records.js";
import { ExpiringIndex } from "./memory_expiring.js";
import { assertIncrements, assertLimit, assertTtl, assertWrites } from "./validate.js";

export interface MemoryStoreOptions {
  /** Clock for lease and key expiry, in epoch-ms. Default `Date.now`. */
  readonly now?: () => number;
}

export class MemoryStore implements Store {
  readonly #now: () => number;
  readonly #leases = new MemoryLeases();
  readonly #nonZero = new NonZeroIndex();
  readonly #pages = new Map<string, PageEntries>();
  /** Ids of pages with at least one entry, sorted, for prefix listing. */
  readonly #pageIds = new SortedPageIds();
  readonly #keys: MemoryKeys;
  readonly #digests = new MemoryDigests();
  readonly #buckets = new BucketIndex();
  readonly #bootstrapped = new Set<number>();
  /** partition -> its presence floor (see Store.presenceFloor). */
  readonly #floors = new Map<number, number>();
  readonly #empty = new EmptyPages();
  /** partition -> its purge floor (see Store.purgeFloor). */
  readonly #purgeFloors = new Map<number, number>();
  /** partition -> page with a tombstone -> when a tombstone of it last changed. */
  readonly #tombs = new Map<number, Map<string, number>>();
  readonly #expiring = new ExpiringIndex();
  /** Whether the increment op being applied stored an entry. */
  #stored = false;
  #closed = false;

  constructor(options: MemoryStoreOptions = {}) {
    this.#now = options.now ?? Date.now;
    this.#keys = new MemoryKeys(this.#now());
  }

  /** Idempotency keys currently remembered, expired ones not yet swept included (for metrics). */
  get rememberedKeys(): number {
    return this.#keys.size;
  }

  async acquire(
    partition: number,
    node: string,
    ttlMs: number,
    options: AcquireOptions = {},
  ): Promise<Lease | null> {
    this.#assertOpen();
    assertTtl("lease ttl", ttlMs);
    return this.#leases.acquire(partition, node, ttlMs, this.#now(), options);
  }

  async renew(leases: readonly Lease[], ttlMs: number): Promise<Lease[]> {
    this.#assertOpen();
    assertTtl("lease ttl", ttlMs);
    return this.#leases.renew(leases, ttlMs, this.#now());
  }

  async release(lease: Lease): Promise<void> {
    this.#assertOpen();
    this.#leases.release(lease);
  }

  async noteBusHeard(node: string, continuing: boolean): Promise<void> {
    this.#assertOpen();
    this.#leases.noteBusHeard(node, continuing, this.#now());
  }

  async busHeard(): Promise<{ now: number; notes: Map<string, BusNote> }> {
    this.#assertOpen();
    return this.#leases.busHeard(this.#now());
  }

  async load(page: string): Promise<PageRecord> {
    this.#assertOpen();
    return recordOf(this.#pages.get(page));
  }

  async loadMany(pages: readonly string[]): Promise<PageRecord[]> {
    this.#assertOpen();
    return Promise.all(pages.map((page) => this.load(page)));
  }

  async loadPrefixed(page: string, prefixes: readonly string[]): Promise<PageRecord> {
    this.#assertOpen();
    return recordOf(this.#pages.get(page), (c) => prefixes.some((p) => c.startsWith(p)));
  }

  async loadExcept(page: string, prefixes: readonly string[]): Promise<PageRecord> {
    this.#assertOpen();
    return recordOf(this.#pages.get(page), (c) => !prefixes.some((p) => c.startsWith(p)));
  }

  async loadEntries(page: string, refs: readonly CounterRef[]): Promise<Array<Entry | undefined>> {
    this.#assertOpen();
    return entriesOf(this.#pages.get(page), refs);
  }

  async digests(partitions: readonly number[]): Promise<string[]> {
    this.#assertOpen();
    return this.#digests.digests(partitions);
  }

  async bucketDigests(partition: number): Promise<string[]> {
    this.#assertOpen();
    return this.#digests.bucketDigests(partition);
  }

  async bucketPages(partition: number, buckets: readonly number[]): Promise<Map<string, PageRecord>> {
    this.#assertOpen();
    const pages = new Map<string, PageRecord>();
    for (const b of buckets) {
      for (const page of this.#buckets.pages(partition, b)) pages.set(page, await this.load(page));
    }
    return pages;
  }

  async isBootstrapped(partition: number): Promise<boolean> {
    this.#assertOpen();
    return this.#bootstrapped.has(partition);
  }

  async markBootstrapped(fence: Fence): Promise<boolean> {
    this.#assertOpen();
    if (!this.#leases.isCurrent(fence)) return false;
    this.#bootstrapped.add(fence.partition);
    return true;
  }

  async write(groups: readonly FencedWrites[]): Promise<Fence[]> {
    this.#assertOpen();
    assertWrites(groups);
    const now = this.#now();
    const stale: Fence[] = [];
    for (const { fence, writes } of groups) {
      if (!this.#leases.isCurrent(fence)) {
        stale.push(fence);
        continue;
      }
      const touched = new Set<string>();
      for (const write of writes) {
        this.#mergeEntry(fence.partition, write);
        touched.add(write.page);
      }
      for (const page of touched) this.#noteEmptiness(fence.partition, page, now);
    }
    return stale;
  }

  async mergePages(
    fence: Fence,
    pages: ReadonlyMap<string, PageRecord>,
    indexedDc: string,
  ): Promise<Map<string, PageRecord> | null> {
    this.#assertOpen();
    const writes = pageWrites(pages, indexedDc);
    assertWrites([{ fence, writes }]);
    const now = this.#now();
    if (!this.#leases.isCurrent(fence)) return null;
    const advanced = new RecordsBuilder();
    const touched = new Set<string>();
    const floor = this.#purgeFloors.get(fence.partition) ?? 0;
    let remains = new Set<string>();
    for (const write of writes) {
      if (!touched.has(write.page)) {
        const record = pages.get(write.page)!;
        const held = this.#pages.get(write.page);
        if (held === undefined && onlyZeroPresence(record)) continue;
        touched.add(write.page);
        remains = purgedRemains(record, (c) => held?.has(c) === true, floor);
      }
      if (remains.has(write.counter)) continue;
      const merged = this.#mergeEntry(fence.partition, write);
      if (merged !== undefined) advanced.add(write.page, write.counter, write.dc, merged);
    }
    for (const page of touched) this.#noteEmptiness(fence.partition, page, now);
    return advanced.build();
  }

  /** Max-merges one entry (with its index and floor); returns the entry as stored if it advanced. */
  #mergeEntry(partition: number, { page, counter, dc, entry, indexed }: EntryWrite): Entry | undefined {
    // A window bucket no window reaches any more is left out: it was removed here, or will be.
    if ((bucketExpiresAt(counter) ?? Infinity) <= this.#now()) return undefined;
    const held = this.#entry(page, counter, dc);
    const p = Math.max(held?.p ?? 0, entry.p);
    const n = Math.max(held?.n ?? 0, entry.n);
    const advanced = p !== (held?.p ?? 0) || n !== (held?.n ?? 0);
    if (advanced) this.#setEntry(partition, page, counter, dc, { p, n });
    if (indexed === true) {
      this.#nonZero.note(partition, { page, counter, dc }, p !== n);
      this.#floors.set(partition, Math.max(this.#floors.get(partition) ?? 0, p));
    }
    return advanced ? { p, n } : undefined;
  }

  async presenceFloor(partition: number): Promise<number> {
    this.#assertOpen();
    return this.#floors.get(partition) ?? 0;
  }

  async removeEmptyPages(fence: Fence, emptySince: number, limit: number): Promise<string[]> {
    this.#assertOpen();
    assertLimit(limit);
    if (!this.#leases.isCurrent(fence)) throw new StaleFenceError(fence);
    const removed: string[] = [];
    for (const page of this.#empty.take(fence.partition, emptySince, limit)) {
      const counters = this.#pages.get(page);
      if (!isEmpty(counters)) continue;
      // Its visit records leave the digest with it; zero presence never was in it.
      for (const [counter, dcs] of counters!)
        for (const dc of [...dcs.keys()])
          if (isVisitRecord(counter)) this.#removeEntry(fence.partition, page, counter, dc, true);
      this.#pages.delete(page);
      this.#pageIds.remove(page);
      this.#buckets.remove(fence.partition, page);
      removed.push(page);
    }
    return removed;
  }

  async removeExpiredBuckets(fence: Fence, limit: number): Promise<number> {
    this.#assertOpen();
    assertLimit(limit);
    const now = this.#now();
    if (!this.#leases.isCurrent(fence)) throw new StaleFenceError(fence);
    const expired = this.#expiring.take(fence.partition, now, limit);
    for (const { page, counter, dc } of expired) this.#removeEntry(fence.partition, page, counter, dc, true);
    for (const page of new Set(expired.map((e) => e.page)))
      if (this.#pages.has(page)) this.#noteEmptiness(fence.partition, page, now);
    return expired.length;
  }

  async purgeFloor(partition: number): Promise<number> {
    this.#assertOpen();
    return this.#purgeFloors.get(partition) ?? 0;
  }

  async countTombstonePages(partition: number, after: number, upTo: number): Promise<number> {
    this.#assertOpen();
    let n = 0;
    for (const at of this.#tombs.get(partition)?.values() ?? []) if (at > after && at <= upTo) n++;
    return n;
  }

  async raisePurgeFloor(fence: Fence, floor: number): Promise<boolean> {
    this.#assertOpen();
    if (!this.#leases.isCurrent(fence)) return false;
    this.#purgeFloors.set(fence.partition, Math.max(this.#purgeFloors.get(fence.partition) ?? 0, floor));
    return true;
  }

  async purgeTombstones(
    fence: Fence,
    deletedBefore: number,
    offset: number,
    limit: number,
  ): Promise<PurgeResult> {
    this.#assertOpen();
    assertLimit(limit);
    const { partition } = fence;
    if (!this.#leases.isCurrent(fence)) throw new StaleFenceError(fence);
    const result = purgeSettled(
      {
        pages: this.#pages,
        tombs: this.#tombs.get(partition),
        floor: this.#purgeFloors.get(partition) ?? 0,
        removeEntry: (page, counter, dc) => this.#removeEntry(partition, page, counter, dc),
        touched: (page) => this.#noteEmptiness(partition, page, this.#now()),
      },
      deletedBefore,
      offset,
      limit,
    );
    this.#purgeFloors.set(partition, result.floor);
    return result;
  }

  /**
   * Removes one entry: a settled delete's, which digests leave out (`counted` false), or an expired
   * window bucket's, which they count. The page goes with its last entry.
   */
  #removeEntry(partition: number, page: string, counter: string, dc: string, counted = false): void {
    const counters = this.#pages.get(page)!;
    const dcs = counters.get(counter)!;
    this.#digests.removed(partition, page, counter, dc, dcs.get(dc)!, counted);
    this.#expiring.forget(partition, { page, counter, dc });
    dcs.delete(dc);
    if (dcs.size > 0) return;
    counters.delete(counter);
    if (counters.size > 0) return;
    this.#pages.delete(page);
    this.#pageIds.remove(page);
    this.#buckets.remove(partition, page);
    this.#empty.forget(partition, page);
  }

  #noteEmptiness(partition: number, page: string, now: number): void {
    this.#empty.note(partition, page, this.#pages.get(page), now);
  }

  async increment(ops: readonly IncrementOp[], keyTtlMs: number): Promise<IncrementOutcome[]> {
    this.#assertOpen();
    assertTtl("key ttl", keyTtlMs);
    assertIncrements(ops);
    const now = this.#now();
    this.#keys.maybeSweep(now);
    return ops.map((op) => this.#incrementOne(op, now, keyTtlMs));
  }

  async restoreKeys(fence: Fence, keys: readonly KeyRestore[], keyTtlMs: number): Promise<boolean> {
    this.#assertOpen();
    assertTtl("key ttl", keyTtlMs);
    if (!this.#leases.isCurrent(fence)) return false;
    this.#keys.restore(keys, this.#now(), keyTtlMs, false);
    return true;
  }

  async importKeys(keys: ReadonlyMap<number, readonly KeyRestore[]>, keyTtlMs: number): Promise<number> {
    this.#assertOpen();
    assertTtl("key ttl", keyTtlMs);
    return [...keys.values()].reduce(
      (n, list) => n + this.#keys.restore(list, this.#now(), keyTtlMs, true),
      0,
    );
  }

  async nonZeroEntries(partition: number): Promise<EntryRef[]> {
    this.#assertOpen();
    return this.#nonZero.list(partition);
  }

  async listPages(prefix: string, cursor: string | undefined, limit: number): Promise<PageList> {
    this.#assertOpen();
    assertLimit(limit);
    return this.#pageIds.list(prefix, cursor, limit);
  }

  async close(): Promise<void> {
    this.#closed = true;
  }

  #incrementOne(op: IncrementOp, now: number, keyTtlMs: number): IncrementOutcome {
    if (!this.#leases.isCurrent(op.fence)) return { kind: "stale" };
    const seen = this.#keys.live(op.page, op.key, now);
    const held = entriesOf(this.#pages.get(op.page), opRefs(op));
    if (seen !== undefined) return answerSeen(seen, op, held);
    if (!changesFit(op, held)) return { kind: "too_large" };
    const partition = op.fence.partition;
    this.#stored = false;
    const entry = this.#change(partition, op.page, op.counter, op.dc, op.delta, op.startAt ?? 0);
    const also = op.also?.map((c) => this.#change(partition, op.page, c.counter, op.dc, c.delta));
    // A durable counter: the page is not empty any more (an op that stored nothing leaves it be).
    if (this.#stored) this.#empty.forget(partition, op.page);
    const payload = op.payload.replaceAll(OWN_VALUE, String(entry.p - entry.n));
    this.#keys.set(op.page, op.key, keyRecord(op, payload, now + keyTtlMs));
    return also === undefined ? { kind: "applied", entry } : { kind: "applied", entry, also };
  }

  /** Adds a signed delta to an entry (p for > 0, n for < 0) and returns a copy of the result. */
  #change(partition: number, page: string, counter: string, dc: string, delta: number, startAt = 0): Entry {
    const stored = this.#entry(page, counter, dc);
    const held = stored ?? { p: startAt, n: startAt };
    let entry = held;
    // An entry started at the floor is stored even when nothing is added, as the op reports it.
    if (delta !== 0 || (stored === undefined && startAt > 0)) {
      entry = delta > 0 ? { p: held.p + delta, n: held.n } : { p: held.p, n: held.n - delta };
      this.#setEntry(partition, page, counter, dc, entry);
      this.#stored = true;
    }
    return { p: entry.p, n: entry.n };
  }

  #entry(page: string, counter: string, dc: string): Entry | undefined {
    return this.#pages.get(page)?.get(counter)?.get(dc);
  }

  /** Sets an entry of a page of `partition`, keeping the partition's digests and bucket index current. */
  #setEntry(partition: number, page: string, counter: string, dc: string, entry: Entry): void {
    let counters = this.#pages.get(page);
    if (counters === undefined) {
      counters = new Map();
      this.#pages.set(page, counters);
      this.#pageIds.add(page);
      this.#buckets.add(partition, page);
    }
    let dcs = counters.get(counter);
    if (dcs === undefined) {
      dcs = new Map();
      counters.set(counter, dcs);
    }
    const set = dcs;
    const old = dcs.get(dc);
    this.#digests.changed(partition, page, counters, counter, dc, old, entry, () =>
      set.set(dc, { p: entry.p, n: entry.n }),
    );
    const expiresAt = old === undefined ? bucketExpiresAt(counter) : undefined;
    if (expiresAt !== undefined) this.#expiring.add(partition, { page, counter, dc }, expiresAt);
    if (isTombstone(counter)) {
      let tombs = this.#tombs.get(partition);
      if (tombs === undefined) this.#tombs.set(partition, (tombs = new Map()));
      tombs.set(page, this.#now());
    }
  }

  async tombDigests(partitions: readonly number[]): Promise<string[]> {
    this.#assertOpen();
    return this.#digests.tombDigests(partitions);
  }

  #assertOpen(): void {
    if (this.#closed) throw new StoreError("store is closed");
  }
}
