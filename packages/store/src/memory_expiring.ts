/**
 * The memory store's index of window buckets (Store.removeExpiredBuckets): per partition, every
 * bucket entry it holds with when it expires (digest.ts, bucketExpiresAt).
 */
import type { EntryRef } from "./store.js";

export class ExpiringIndex {
  /** partition -> "page\0counter\0dc" -> [the entry, when it expires]. */
  readonly #due = new Map<number, Map<string, [EntryRef, number]>>();

  /** A bucket entry was created. */
  add(partition: number, ref: EntryRef, expiresAt: number): void {
    let due = this.#due.get(partition);
    if (due === undefined) this.#due.set(partition, (due = new Map()));
    due.set(`${ref.page}\u0000${ref.counter}\u0000${ref.dc}`, [ref, expiresAt]);
  }

  /** The entry left the store before it expired (its page went as empty, or was purged). */
  forget(partition: number, ref: EntryRef): void {
    this.#due.get(partition)?.delete(`${ref.page}\u0000${ref.counter}\u0000${ref.dc}`);
  }

  /** Up to `limit` bucket entries of the partition expired at `now`, soonest first, forgotten here. */
  take(partition: number, now: number, limit: number): EntryRef[] {
    const due = this.#due.get(partition);
    const taken = [...(due ?? [])]
      .filter(([, [, at]]) => at <= now)
      .sort((a, b) => a[1][1] - b[1][1])
      .slice(0, limit);
    for (const [id] of taken) due!.delete(id);
    return taken.map(([, [ref]]) => ref);
  }
}
