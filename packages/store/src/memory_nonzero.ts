/**
 * The memory store's index of non-zero indexed entries (Store.nonZeroEntries): per partition, this
 * DC's presence entries left non-zero, so a new owner finds presence a dead one left behind.
 */
import type { EntryRef } from "./store.js";

export class NonZeroIndex {
  /** partition -> "page\0counter\0dc" -> the entry. */
  readonly #refs = new Map<number, Map<string, EntryRef>>();

  /** The indexed entry is now non-zero (kept) or zero (forgotten). */
  note(partition: number, ref: EntryRef, nonZero: boolean): void {
    const id = `${ref.page}\u0000${ref.counter}\u0000${ref.dc}`;
    let refs = this.#refs.get(partition);
    if (nonZero) {
      if (refs === undefined) this.#refs.set(partition, (refs = new Map()));
      refs.set(id, ref);
    } else if (refs?.delete(id) === true && refs.size === 0) this.#refs.delete(partition);
  }

  /** Copies of the partition's non-zero entries. */
  list(partition: number): EntryRef[] {
    return [...(this.#refs.get(partition)?.values() ?? [])].map((ref) => ({ ...ref }));
  }
}
