/**
 * Durable state of one data center: partition leases with fencing epochs, PN-counter entries of
 * every page, and idempotency records of publisher increments. Two implementations: in-memory (the
 * embedded default) and Redis.
 *
 * Time: key expiry is judged against the store's own clock (`now`, injected, default `Date.now`),
 * so every implementation decides the same way and tests can move time; the Redis store runs
 * leases on its server's clock unless given one (redis_store.ts). A lease or key is live while
 * `now < expiresAt`. Fences need no clock.
 */
import type { Entry } from "@livecount/crdt";

/**
 * Proof of partition ownership. Every write carries it and is applied only while the fence is
 * current: the partition's lease still names this holder and this epoch. The holder is compared as
 * well as the epoch: a store that lost its last writes (a Redis restarted from an `everysec` file)
 * can hand an epoch out again, and the holder tells its two owners apart.
 */
export interface Fence {
  readonly partition: number;
  /** The node incarnation that took the lease. */
  readonly node: string;
  readonly epoch: number;
}

export interface Lease extends Fence {
  /** Epoch-ms from which the lease is expired and another node may take the partition. */
  readonly expiresAt: number;
}

/** An idempotency record its owner answered, written again (Store.restoreKeys). */
export interface KeyRestore {
  readonly page: string;
  readonly key: string;
  readonly counter: string;
  readonly delta: number;
  /** As IncrementOp.fingerprint: set for resets and deletes. */
  readonly fingerprint?: string;
  /** The answer as a retry gets it (IncrementOp.payload with its value in place). */
  readonly payload: string;
}

/** Every data center's entry of every counter of a page (presence under VIEWERS_COUNTER). */
export type PageRecord = Record<string, Record<string, Entry>>;

/**
 * Sets an entry to the per-field max of what the store holds and `entry`. The page must be in the
 * partition of the group's fence: digests and bucket indexes are kept per partition.
 */
export interface EntryWrite {
  readonly page: string;
  readonly counter: string;
  readonly dc: string;
  readonly entry: Entry;
  /**
   * This data center's own presence entry: kept in its partition's index of non-zero entries (see
   * {@link Store.nonZeroEntries}) while p != n, and its `p` raises the partition's presence floor
   * (see {@link Store.presenceFloor}).
   */
  readonly indexed?: boolean;
}

/** One data center's entry of one counter of a page. */
export type CounterRef = Pick<EntryRef, "counter" | "dc">;

/** An indexed entry that is non-zero, as listed by {@link Store.nonZeroEntries}. */
export interface EntryRef {
  readonly page: string;
  readonly counter: string;
  readonly dc: string;
}

export interface FencedWrites {
  readonly fence: Fence;
  readonly writes: readonly EntryWrite[];
}

/** A signed change to one counter's entry (p for > 0, n for < 0, 0 changes nothing). */
export interface CounterChange {
  readonly counter: string;
  readonly delta: number;
}

/** In an IncrementOp's payload: replaced by the value of the op's entry right after it applied. */
export const OWN_VALUE = "{own}";

export interface IncrementOp {
  readonly fence: Fence;
  readonly page: string;
  readonly counter: string;
  readonly dc: string;
  /** Signed safe integer applied to the data center's entry (p for > 0, n for < 0, 0 only records the key). */
  readonly delta: number;
  /** Idempotency key, scoped to the page. */
  readonly key: string;
  /**
   * Kept for the caller and returned on a duplicate (e.g. the value and time of the first answer).
   * Every `{own}` in it is replaced, when the op applies, by the value (p - n) of the data center's
   * entry of `counter` right after it: the one part of an answer that only the store knows, since an
   * earlier op of the same call may turn out to be a duplicate and not move the entry.
   */
  readonly payload: string;
  /**
   * Changes to other counters of the same page and data center, applied atomically with `delta`
   * under the same key (a delete resets a counter and records its tombstone). Each counter at most
   * once, and never `counter` itself.
   */
  readonly also?: readonly CounterChange[];
  /**
   * What a retry under the same key must match to be a duplicate, instead of `counter` and
   * `delta`: for changes whose delta is computed by the owner at the time (a reset cancels the value
   * it observes), so a retry after further changes still gets the original answer. A key recorded
   * with a fingerprint only matches that fingerprint; one recorded without only `counter` and `delta`.
   */
  readonly fingerprint?: string;
  /**
   * Where the data center's entry of `counter` starts when the store holds none: `{p: startAt,
   * n: startAt}` (value 0), then the change; stored even when the change is 0, as the outcome reports it. The owner passes its partition's purge floor, so an
   * entry that restarts after its counter was purged lies above every copy of the old one that
   * another DC may still send (see {@link Store.purgeTombstones}). Default 0.
   */
  readonly startAt?: number;
}

export type IncrementOutcome =
  /**
   * Applied now; `entry` is the data center's entry after the change and `also` (present when the op
   * had `also`) the entries of the other counters, in the op's order.
   */
  | { readonly kind: "applied"; readonly entry: Entry; readonly also?: readonly Entry[] }
  /**
   * The key was applied before with the same fingerprint (or counter and delta); `payload` is what
   * was stored then, `entry` the data center's entry of `counter` now (absent when it holds none)
   * and `also` those of the op's further changes: they hold the first try even when that was never
   * answered (its call failed after it applied).
   */
  | {
      readonly kind: "duplicate";
      readonly payload: string;
      readonly entry?: Entry;
      /** With `also`: the entries of its counters now, in its order (undefined where absent). */
      readonly also?: ReadonlyArray<Entry | undefined>;
    }
  /** The key was applied before to a different fingerprint, counter or delta. */
  | { readonly kind: "conflict" }
  /**
   * Nothing was applied: a change of the op would take its entry's p or n past
   * `Number.MAX_SAFE_INTEGER`, which no replica can hold exactly. Checked after the key, so a retry
   * of an op that applied is still answered as a duplicate.
   */
  | { readonly kind: "too_large" }
  /** The fence is no longer current: nothing was applied. */
  | { readonly kind: "stale" }
  /**
   * The op's part of the store failed while the rest of the call went through (a Redis Cluster shard
   * down, failing over, or short of the replicas a write must wait for): it may or may not have
   * applied, so the caller retries it under the same key.
   */
  | { readonly kind: "unavailable" };

/** What one {@link Store.purgeTombstones} call did. */
export interface PurgeResult {
  /** Pages that lost deleted counters, with the (public) names of the counters purged from each. */
  readonly purged: ReadonlyArray<{ readonly page: string; readonly counters: readonly string[] }>;
  /**
   * Deleted counters of the pages looked at that had to stay: written in several data centers, or
   * changed since the delete.
   */
  readonly kept: number;
  /** The partition's purge floor after the call (see {@link Store.purgeFloor}). */
  readonly floor: number;
  /** Where the next call goes on (pass as `offset`), or undefined when every candidate was looked at. */
  readonly next: number | undefined;
}

/** One page of {@link Store.listPages}; `cursor` is undefined after the last page. */
export interface PageList {
  readonly pages: string[];
  readonly cursor: string | undefined;
}

export interface AcquireOptions {
  /**
   * Takes the lease at once, with a new epoch, from a live holder whose id starts with this prefix:
   * a restarted process reclaiming the leases of its own previous incarnation (`<node id>/`).
   */
  readonly reclaimFrom?: string;
}

/** A counter node heard its bus without a break from `since` to `at`, by the store's clock (Store.noteBusHeard). */
export interface BusNote {
  readonly since: number;
  readonly at: number;
}

export interface Store {
  /**
   * Takes or renews the partition's lease for `node` until `now + ttlMs`. A node that holds a live
   * lease keeps its epoch; taking a free or expired lease (even one's own) bumps the epoch. Epochs
   * of a partition are never reused, even after a release. Null while another node holds it (unless
   * `reclaimFrom` says it is a previous incarnation of this one).
   */
  acquire(partition: number, node: string, ttlMs: number, options?: AcquireOptions): Promise<Lease | null>;
  /**
   * Extends each lease still held (same node and epoch) to `now + ttlMs`, in one round trip. One
   * that ran out is renewed too while nobody took it (a takeover bumps the epoch), so a holder whose
   * renewal came late keeps its epoch and its state; until then its fence was refused as stale.
   * Returns the renewed leases; lost ones are missing and must be re-acquired. When part of
   * the store fails and the rest answers, rejects with a {@link PartialWriteError} of the leases
   * not tried and those renewed.
   */
  renew(leases: readonly Lease[], ttlMs: number): Promise<Lease[]>;
  /** Frees the partition if `lease` still holds it at its epoch; otherwise does nothing. */
  release(lease: Lease): Promise<void>;
  /**
   * Notes, by the store's own clock, that counter node `node` hears its bus: its note's `since`
   * stays when `continuing` (it has heard it without a break since its last note), else a stretch
   * begins now. To a node of the same DC that hears nothing, proof that the bus carries for the
   * others and that it is the one cut off (the counter node's BusIsolation). One clock for every
   * node's notes: theirs may be seconds apart.
   */
  noteBusHeard(node: string, continuing: boolean): Promise<void>;
  /**
   * The store's clock now and the notes of every node that left one within the last hour, by node
   * id (older ones are dropped: a node gone, or renamed by a restart).
   */
  busHeard(): Promise<{ readonly now: number; readonly notes: Map<string, BusNote> }>;
  /** Every counter's entries of the page (a copy; empty when the page has none). */
  load(page: string): Promise<PageRecord>;
  /** `load` of many pages in one round trip, in the order given. */
  loadMany(pages: readonly string[]): Promise<PageRecord[]>;
  /**
   * Every DC's entries of one page's counters whose names start with one of `prefixes` (a page's
   * time buckets: its unique-visitor registers, its peaks), as counter -> DC -> entry.
   */
  loadPrefixed(page: string, prefixes: readonly string[]): Promise<PageRecord>;
  /** `load` without the counters whose names start with one of `prefixes` (a page without its time buckets). */
  loadExcept(page: string, prefixes: readonly string[]): Promise<PageRecord>;
  /** The named entries of one page (undefined where it holds none), in the order given. */
  loadEntries(page: string, refs: readonly CounterRef[]): Promise<Array<Entry | undefined>>;
  /**
   * Max-merges entries in one round trip, each group atomically and only if its fence is still
   * current. Returns the fences found stale; their writes were not applied. A write that does not
   * advance the stored entry (e.g. a zero entry for an absent one) changes nothing. When part of the
   * store fails and the rest answers (a Redis Cluster shard down or failing over), rejects with a
   * {@link PartialWriteError} saying which groups went through.
   */
  write(groups: readonly FencedWrites[]): Promise<Fence[]>;
  /**
   * Max-merges another DC's records of pages of the fence's partition (anti-entropy) in one round
   * trip, each page atomically: every entry that advances what the store holds is written, with
   * digests and indexes, and returned as now stored, per page (pages where nothing advanced are
   * absent). A page the store does not hold whose record carries nothing but zero presence is left
   * out: nothing to learn, and a page removed as empty stays removed. The presence entries of
   * `indexedDc` (this DC) are indexed as `write` does with `indexed`. A purged counter's remains are left
   * out too: a deleted counter the store holds nothing of, purgeable in the record, with its entry
   * not above the purge floor (what another DC still holds of a counter
   * purged here; see {@link Store.purgeTombstones}). Null when the fence is stale (pages
   * merged before it was found stale stay merged, as with any write under a fence about to expire).
   */
  mergePages(
    fence: Fence,
    pages: ReadonlyMap<string, PageRecord>,
    indexedDc: string,
  ): Promise<Map<string, PageRecord> | null>;
  /**
   * Applies idempotent increments in order, each atomically (fence check, key check, change and key
   * record in one step), in one round trip. `keyTtlMs`: how long a key is remembered from when it was
   * recorded; a retry after that counts again. Malformed input rejects before anything is applied.
   */
  increment(ops: readonly IncrementOp[], keyTtlMs: number): Promise<IncrementOutcome[]>;
  /**
   * Writes again, under the fence, the idempotency records of changes its owner answered: a store
   * that lost its last writes lost their keys with them, or holds an answer the owner corrected
   * since (the owner counted on from its own count). Each replaces the key's record, live for
   * `keyTtlMs` from now. The pages must be of the fence's partition. False (nothing written) when
   * the fence is stale.
   */
  restoreKeys(fence: Fence, keys: readonly KeyRestore[], keyTtlMs: number): Promise<boolean>;
  /**
   * Stores other data centers' idempotency records (KeyReplication), by the partition of their
   * pages, each live for `keyTtlMs` from now, only where the key holds no live record: this DC's
   * own answers stay. Needs no fence (it never replaces a live record, so any node may import at
   * any time, whoever holds the partition) and is not waited for by replicas (losing one reopens
   * only the gap it closes). One round trip per server. Resolves with how many it wrote.
   */
  importKeys(keys: ReadonlyMap<number, readonly KeyRestore[]>, keyTtlMs: number): Promise<number>;
  /**
   * `listener` runs each time the store's connection is ready again after it dropped, to a server
   * that restarted meanwhile: it may have lost its last writes. Absent where nothing can drop (the
   * memory store).
   */
  onReconnect?(listener: () => void): void;
  /**
   * Ids of pages holding any entry, starting with `prefix`, in ascending byte order, at most `limit`
   * (>= 1) per call. Pass the returned opaque `cursor` to continue; undefined starts at the first.
   */
  listPages(prefix: string, cursor: string | undefined, limit: number): Promise<PageList>;
  /**
   * The indexed entries of a partition whose value is non-zero, as last written with
   * `indexed: true`. A new owner uses it to find presence a dead owner left behind on pages nobody
   * touches any more, so it can correct them.
   */
  nonZeroEntries(partition: number): Promise<EntryRef[]>;
  /**
   * Each partition's digest (see digest.ts), in the order given: equal in two data centers exactly
   * when they hold the same entries of its pages (up to a 2^-64 chance). Kept current by every
   * write and increment, atomically with them.
   */
  digests(partitions: readonly number[]): Promise<string[]>;
  /**
   * Each partition's tombstone digest, in the order given: the XOR of the hashes (digest.ts) of every
   * tombstone entry it holds, settled deletes included. Equal in two DCs exactly when they hold the
   * same tombstones (up to a 2^-64 chance): what a purge waits for (docs/architecture.md).
   */
  tombDigests(partitions: readonly number[]): Promise<string[]>;
  /** The digests of a partition's DIGEST_BUCKETS buckets, bucket 0 first. */
  bucketDigests(partition: number): Promise<string[]>;
  /** Every page of the given buckets of a partition, with all its entries. */
  bucketPages(partition: number, buckets: readonly number[]): Promise<Map<string, PageRecord>>;
  /** Whether the partition was marked bootstrapped: its data center's state was learned from peers (or it had none). */
  isBootstrapped(partition: number): Promise<boolean>;
  /** Marks the partition bootstrapped, if the fence is current; false (nothing marked) when stale. */
  markBootstrapped(fence: Fence): Promise<boolean>;
  /**
   * Not below any `p` of an own presence entry (a write marked `indexed`) this store ever held for
   * the partition's pages. A page whose own presence entry is absent (never written, or removed
   * while empty) starts it at `{p: floor, n: floor}`: a copy of an older entry that another DC kept
   * can then never hide a viewer who comes later.
   */
  presenceFloor(partition: number): Promise<number>;
  /**
   * Removes, under the fence, at most `limit` pages of the partition that have been empty since
   * `emptySince` or earlier and still are (every entry a zero presence entry: no viewer anywhere,
   * no durable counter), from the pages, the listings and every index. A page stops being empty,
   * and its time restarts, when any entry of it is written non-zero. Returns the removed ids, or
   * rejects with StaleFenceError when the fence is stale.
   */
  removeEmptyPages(fence: Fence, emptySince: number, limit: number): Promise<string[]>;
  /**
   * Removes up to `limit` entries of time buckets (window buckets `@w:`, unique-visitor registers
   * `@u:`, peaks `@pm:` and `@ph:`) of the fence's partition that no read reaches any more (digest.ts,
   * bucketExpiresAt; every DC's, as every store removes them on the same schedule), with their
   * digests and indexes; a page left empty is noted
   * as such, one left without entries goes. Merges and writes leave such entries out, so nothing
   * brings them back. Returns how many were removed, or rejects with StaleFenceError.
   */
  removeExpiredBuckets(fence: Fence, limit: number): Promise<number>;
  /**
   * Not below the `p` of any entry of a counter purged from the partition's pages, and never lowered. The owner starts this DC's entry of a counter the store
   * holds none of at `{p: floor, n: floor}` (`IncrementOp.startAt`).
   */
  purgeFloor(partition: number): Promise<number>;
  /**
   * Raises the partition's purge floor to `floor` if it is lower, under the fence: a DC learning the
   * partition from a peer takes the peer's. False (nothing raised) when the fence is stale.
   */
  raisePurgeFloor(fence: Fence, floor: number): Promise<boolean>;
  /**
   * Purges, under the fence, deleted counters of the partition's pages whose tombstone last changed
   * in this store at `deletedBefore` or earlier: the counter's entries and its tombstone leave the
   * page (and the page, the listings and the indexes when nothing else is left), and the purge floor
   * rises to the counter's entry. Only counters written in one data center at most, whose entry is
   * zero (`p == n`) and whose activity is exactly the tombstone's (no change since the delete, none
   * missing here) go; the rest are counted in `kept`. Pages are
   * taken in the order their tombstones last changed, from `offset`, at most `limit` (>= 1) per call.
   * Rejects with StaleFenceError when the fence is stale. Why this is safe without asking other
   * DCs: docs/architecture.md, "Purging tombstones".
   */
  purgeTombstones(fence: Fence, deletedBefore: number, offset: number, limit: number): Promise<PurgeResult>;
  /** How many of the partition's pages hold a tombstone that last changed after `after`, up to `upTo`. */
  countTombstonePages(partition: number, after: number, upTo: number): Promise<number>;
  /** Releases connections; later calls reject with a {@link StoreError}. */
  close(): Promise<void>;
}

export class StoreError extends Error {
  override name = "StoreError";
}

/**
 * The first connection to Redis failed. `permanent`: Redis refused the credentials; no later try can
 * mend it. Otherwise it may just not be up yet (or still loading its data).
 */
export class StoreConnectError extends StoreError {
  override name = "StoreConnectError";
  readonly permanent: boolean;

  constructor(message: string, options: { readonly cause: unknown; readonly permanent: boolean }) {
    super(message, { cause: options.cause });
    this.permanent = options.permanent;
  }
}

/** A malformed entry, delta, ttl or limit: a caller bug, rejected before anything is applied. */
export class InvalidStoreInputError extends StoreError {
  override name = "InvalidStoreInputError";
}

/**
 * A `write` (or `renew`) whose part for some partitions failed (maybe applied, maybe not: write them
 * again) while the rest went through: `result` is what the call returns for that rest.
 */
export class PartialWriteError<T = Fence[]> extends StoreError {
  override name = "PartialWriteError";
  constructor(
    /** The groups (or leases) that failed. */
    readonly failed: readonly Fence[],
    /** The call's answer for the rest: the stale fences of `write`, the renewed leases of `renew`. */
    readonly result: T,
    options?: { cause?: unknown },
  ) {
    super(`the store failed for ${failed.length} partitions of the call`, options);
  }
}

/** The fence's epoch is no longer the partition's current one: the writer lost ownership. */
export class StaleFenceError extends StoreError {
  override name = "StaleFenceError";
  constructor(
    readonly fence: Fence,
    options?: { cause?: unknown },
  ) {
    super(
      `partition ${fence.partition} is no longer owned by ${fence.node} at epoch ${fence.epoch}`,
      options,
    );
  }
}
