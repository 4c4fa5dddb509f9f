/**
 * The memory store's digests (digest.ts): per partition, each bucket's XOR of its entries' hashes,
 * settled deletes and zero presence left out, and the tombstone digest (every tombstone entry). The
 * store calls `changed` around every entry it sets, so they never disagree with the entries.
 */
import type { Entry } from "@livecount/crdt";
import {
  DIGEST_BUCKETS,
  TOMBSTONE_PREFIX,
  deletedCounterOf,
  ZERO_DIGEST,
  bucketExpiresAt,
  bucketOf,
  entryHash,
  isPresenceCounter,
  purgeableAt,
  xorDigest,
} from "./digest.js";

/** Counter name -> data center -> entry. */
export type PageEntries = Map<string, Map<string, Entry>>;

export class MemoryDigests {
  /** partition -> its buckets' digests; absent: all zero. */
  readonly #buckets = new Map<number, string[]>();
  /** partition -> its tombstone digest (Store.tombDigests). */
  readonly #tombs = new Map<number, string>();

  /**
   * One entry of a page changes from `old` (undefined: new) to `entry`; `set` stores it. A settled
   * delete counts nothing: it is counted while the entry changes, and left out again if still settled.
   */
  changed(
    partition: number,
    page: string,
    counters: PageEntries,
    counter: string,
    dc: string,
    old: Entry | undefined,
    entry: Entry,
    set: () => void,
  ): void {
    const deleted =
      isPresenceCounter(counter) || bucketExpiresAt(counter) !== undefined
        ? undefined
        : (deletedCounterOf(counter) ?? counter);
    if (deleted !== undefined) this.#toggleSettled(partition, page, counters, deleted);
    let change = entryHash(page, counter, dc, entry);
    if (old !== undefined) change = xorDigest(change, entryHash(page, counter, dc, old));
    this.#xor(partition, bucketOf(page), change);
    set();
    if (deleted !== undefined) this.#toggleSettled(partition, page, counters, deleted);
    if (counter.startsWith(TOMBSTONE_PREFIX)) this.#tombChanged(partition, change);
  }

  /**
   * An entry leaves the page: a settled delete's, which only the tombstone digest held, or (`counted`)
   * one the bucket digest holds, an expired window bucket.
   */
  removed(partition: number, page: string, counter: string, dc: string, old: Entry, counted = false): void {
    if (counted) this.#xor(partition, bucketOf(page), entryHash(page, counter, dc, old));
    if (counter.startsWith(TOMBSTONE_PREFIX)) this.#tombChanged(partition, entryHash(page, counter, dc, old));
  }

  digests(partitions: readonly number[]): string[] {
    return partitions.map((p) => (this.#buckets.get(p) ?? []).reduce(xorDigest, ZERO_DIGEST));
  }

  bucketDigests(partition: number): string[] {
    const digests = this.#buckets.get(partition);
    return Array.from({ length: DIGEST_BUCKETS }, (_, b) => digests?.[b] ?? ZERO_DIGEST);
  }

  tombDigests(partitions: readonly number[]): string[] {
    return partitions.map((p) => this.#tombs.get(p) ?? ZERO_DIGEST);
  }

  /** XORs a settled delete's entries (counter and tombstone) into the digest; nothing when not settled. */
  #toggleSettled(partition: number, page: string, counters: PageEntries, counter: string): void {
    const tomb = counters.get(`${TOMBSTONE_PREFIX}${counter}`);
    if (tomb === undefined || purgeableAt(counters.get(counter)?.values() ?? [], tomb.values()) === undefined)
      return;
    let change = ZERO_DIGEST;
    for (const name of [counter, `${TOMBSTONE_PREFIX}${counter}`])
      for (const [dc, e] of counters.get(name) ?? [])
        change = xorDigest(change, entryHash(page, name, dc, e));
    this.#xor(partition, bucketOf(page), change);
  }

  #tombChanged(partition: number, change: string): void {
    this.#tombs.set(partition, xorDigest(this.#tombs.get(partition) ?? ZERO_DIGEST, change));
  }

  #xor(partition: number, bucket: number, change: string): void {
    let digests = this.#buckets.get(partition);
    if (digests === undefined) this.#buckets.set(partition, (digests = []));
    digests[bucket] = xorDigest(digests[bucket] ?? ZERO_DIGEST, change);
  }
}
