/**
 * Anti-entropy between data centers on the bus (msgpack; internal, like internal.ts): the digests a
 * node compares, the bucket digests of a partition, and the pages of the buckets that differ. The
 * protocol itself is apps/counter/src/anti_entropy.ts.
 */
import type { Entries } from "@livecount/crdt";

/** A digest of stored entries: 16 lowercase hex digits (XOR of 64-bit entry hashes; see the store). */
export type Digest = string;

/**
 * Anti-entropy, a counter node -> another DC (`lc.ae.<dc>`): the digests of partitions the sender
 * holds. The holder of each partition there compares with its own and, where they differ, starts a
 * comparison of buckets. Sent on first contact, when a DC is heard again or after a gap, and
 * periodically.
 */
export interface AeSummary {
  readonly type: "ae_summary";
  readonly from: string;
  readonly to: string;
  readonly digests: ReadonlyArray<readonly [partition: number, digest: Digest]>;
  /**
   * The tombstone digest of each partition of `digests`, in the same order (Store.tombDigests): equal
   * ones tell the receiver the sender holds the same tombstones (a purge waits for that). Absent from
   * senders of an earlier release.
   */
  readonly tombs?: readonly Digest[];
  /** Partitions the sender is bootstrapping: compare them even when the digests are equal. */
  readonly bootstrap?: readonly number[];
}

/** Holder of a partition -> the other DC's holder (`lc.ae.<dc>.<partition>`): its bucket digests. */
export interface AeBuckets {
  readonly type: "ae_buckets";
  readonly from: string;
  readonly to: string;
  readonly partition: number;
  readonly digests: readonly Digest[];
  /** With `bootstrap`: the sender's purge floor of the partition (as AeEntries.floor). */
  readonly floor?: number;
  /** The receiver asked for this comparison to bootstrap the partition. */
  readonly bootstrap?: boolean;
  /**
   * The sender had not bootstrapped the partition itself when it read these digests: what it holds
   * may lack what the DCs that do hold. A DC learning the partition merges what such a sender sends
   * but is not taught by it (bootstrap.ts). Absent from senders of an earlier release.
   */
  readonly senderLearning?: boolean;
}

/**
 * Holder -> holder: every DC's entries of every page of some buckets, read from the sender's store.
 * Merge is a per-entry max, so any DC's entries may travel, and a DC gets its own back from a peer.
 * `pull` (on the last message of a transfer) asks for the same buckets back; `done` ends a transfer
 * that answered a pull.
 */
export interface AeEntries {
  readonly type: "ae_entries";
  readonly from: string;
  readonly to: string;
  readonly partition: number;
  readonly pages: Readonly<Record<string, Readonly<Record<string, Entries>>>>;
  readonly pull?: readonly number[];
  readonly done?: boolean;
  /**
   * With `done`: the sender's purge floor of the partition (Store.purgeFloor). A DC that learns the
   * partition from peers (a rebuilt one) starts its entries above every entry any DC purged.
   */
  readonly floor?: number;
  /** With `pull` or `done`: the sender is itself still learning the partition (as AeBuckets.senderLearning). */
  readonly senderLearning?: boolean;
}

/** The most pages one anti-entropy message may carry. */
export const MAX_AE_PAGES = 10_000;

export type AntiEntropyMessage = AeSummary | AeBuckets | AeEntries;
