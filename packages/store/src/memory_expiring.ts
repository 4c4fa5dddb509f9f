/**
 * The memory store's index of time buckets by expiry (Store.removeExpiredBuckets): per partition,
 * the entries of each expiry time. Buckets expire on minute, hour and day boundaries, so there are
 * few distinct times and many entries for each (every register of a day expires at once): taking
 * the due ones costs the times looked at and the entries taken, not the whole index.
 */
import type { EntryRef } from "./store.js";

interface PartitionIndex {
  /** expiry -> id -> entry. */
  readonly byTime: Map<number, Map<string, EntryRef>>;
  /** id -> its expiry. */
  readonly timeOf: Map<string, number>;
}

export class ExpiringIndex {
  readonly #partitions = new Map<number, PartitionIndex>();

  /** A bucket entry was created. */
  add(partition: number, ref: EntryRef, expiresAt: number): void {
    let index = this.#partitions.get(partition);
    if (index === undefined)
      this.#partitions.set(partition, (index = { byTime: new Map(), timeOf: new Map() }));
    const id = idOf(ref);
    this.#drop(index, id);
    let due = index.byTime.get(expiresAt);
    if (due === undefined) index.byTime.set(expiresAt, (due = new Map()));
    due.set(id, ref);
    index.timeOf.set(id, expiresAt);
  }

  /** The entry left the store before it expired (its page went as empty, or was purged). */
  forget(partition: number, ref: EntryRef): void {
    const index = this.#partitions.get(partition);
    if (index !== undefined) this.#drop(index, idOf(ref));
  }

  /** Up to `limit` bucket entries of the partition expired at `now`, soonest first, forgotten here. */
  take(partition: number, now: number, limit: number): EntryRef[] {
    const index = this.#partitions.get(partition);
    if (index === undefined) return [];
    const times = [...index.byTime.keys()].filter((t) => t <= now).sort((a, b) => a - b);
    const taken: EntryRef[] = [];
    for (const time of times) {
      const due = index.byTime.get(time)!;
      for (const [id, ref] of due) {
        if (taken.length === limit) return taken;
        taken.push(ref);
        due.delete(id);
        index.timeOf.delete(id);
      }
      index.byTime.delete(time);
    }
    return taken;
  }

  #drop(index: PartitionIndex, id: string): void {
    const time = index.timeOf.get(id);
    if (time === undefined) return;
    index.timeOf.delete(id);
    const due = index.byTime.get(time);
    due?.delete(id);
    if (due?.size === 0) index.byTime.delete(time);
  }
}

function idOf(ref: EntryRef): string {
  return `${ref.page}\u0000${ref.counter}\u0000${ref.dc}`;
}
