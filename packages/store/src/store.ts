/**
 * Durable state of one data center: partition leases with fencing epochs, PN-counter entries of
 * every page, and idempotency records of publisher increments. Two implementations: in-memory (the
 * embedded default) and Redis.
 */
import type { Entry } from "@livecount/crdt";

/** Proof of partition ownership. Every write carries it; a write with a stale epoch is rejected. */
export interface Fence {
  readonly partition: number;
  readonly epoch: number;
}

export interface Lease extends Fence {
  readonly node: string;
  /** Epoch-ms after which another node may take the partition. */
  readonly expiresAt: number;
}

/** Every data center's entry of every counter of a page (presence under VIEWERS_COUNTER). */
export type PageRecord = Record<string, Record<string, Entry>>;

/** Sets an entry to the per-field max of what the store holds and `entry`. */
export interface EntryWrite {
  readonly page: string;
  readonly counter: string;
  readonly dc: string;
  readonly entry: Entry;
}

export interface FencedWrites {
  readonly fence: Fence;
  readonly writes: readonly EntryWrite[];
}

export interface IncrementOp {
  readonly fence: Fence;
  readonly page: string;
  readonly counter: string;
  readonly dc: string;
  /** Signed change applied to the data center's entry (p for > 0, n for < 0). */
  readonly delta: number;
  /** Idempotency key, scoped to the page. */
  readonly key: string;
  /** Kept for the caller and returned as-is on a duplicate (e.g. the value and time of the first answer). */
  readonly payload: string;
}

export type IncrementOutcome =
  /** Applied now; `entry` is the data center's entry after the change. */
  | { readonly kind: "applied"; readonly entry: Entry }
  /** The key was applied before with the same counter and delta; `payload` is what was stored then. */
  | { readonly kind: "duplicate"; readonly payload: string }
  /** The key was applied before to a different counter or delta. */
  | { readonly kind: "conflict" }
  /** The fence is no longer current: nothing was applied. */
  | { readonly kind: "stale" };

export interface Store {
  /**
   * Takes or renews the partition's lease for `node`. A node that already holds the lease keeps
   * its epoch; a takeover (free or expired lease) bumps the epoch. Null while another node holds it.
   */
  acquire(partition: number, node: string, ttlMs: number): Promise<Lease | null>;
  /** Renews leases held by `node`; returns the ones still held (lost ones are missing). */
  renew(leases: readonly Lease[], ttlMs: number): Promise<Lease[]>;
  release(lease: Lease): Promise<void>;
  load(page: string): Promise<PageRecord>;
  /**
   * Max-merges entries in one round trip, each group only if its fence is still current. Returns
   * the fences found stale; their writes were not applied.
   */
  write(groups: readonly FencedWrites[]): Promise<Fence[]>;
  /**
   * Applies idempotent increments in order, each atomically (fence check, key check, change and key
   * record in one step), in one round trip. `keyTtlMs`: how long a key is remembered.
   */
  increment(ops: readonly IncrementOp[], keyTtlMs: number): Promise<IncrementOutcome[]>;
  close(): Promise<void>;
}

export class StoreError extends Error {
  override name = "StoreError";
}

/** The fence's epoch is no longer the partition's current one: the writer lost ownership. */
export class StaleFenceError extends StoreError {
  override name = "StaleFenceError";
  constructor(
    readonly fence: Fence,
    options?: { cause?: unknown },
  ) {
    super(`partition ${fence.partition} is no longer owned at epoch ${fence.epoch}`, options);
  }
}
