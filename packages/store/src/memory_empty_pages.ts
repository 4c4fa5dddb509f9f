/**
 * The memory store's index of empty pages (Store.removeEmptyPages): per partition, since when each
 * empty page has been empty. A page is empty when every entry it holds is a zero presence entry or
 * a visit record (unique-visitor registers, peaks).
 */
import { isPresenceCounter, isVisitRecord } from "./digest.js";
import type { PageEntries } from "./memory_digests.js";

export class EmptyPages {
  /** partition -> empty page -> since when. */
  readonly #since = new Map<number, Map<string, number>>();

  /** The page's entries changed (undefined: it holds none): notes or forgets since when it is empty. */
  note(partition: number, page: string, counters: PageEntries | undefined, now: number): void {
    let empty = this.#since.get(partition);
    if (isEmpty(counters)) {
      if (empty === undefined) this.#since.set(partition, (empty = new Map()));
      if (!empty.has(page)) empty.set(page, now);
    } else empty?.delete(page);
  }

  /** The page holds a durable counter, or left the store. */
  forget(partition: number, page: string): void {
    this.#since.get(partition)?.delete(page);
  }

  /** Up to `limit` pages of the partition empty since `emptySince` or earlier, oldest first, forgotten here. */
  take(partition: number, emptySince: number, limit: number): string[] {
    const empty = this.#since.get(partition);
    const due = [...(empty ?? [])]
      .filter(([, since]) => since <= emptySince)
      .sort((a, b) => a[1] - b[1])
      .slice(0, limit)
      .map(([page]) => page);
    for (const page of due) empty!.delete(page);
    return due;
  }
}

/** Every entry a zero presence entry or a visit record: no viewer anywhere, no durable counter. */
export function isEmpty(counters: PageEntries | undefined): boolean {
  if (counters === undefined) return false;
  for (const [counter, dcs] of counters) {
    if (isVisitRecord(counter)) continue;
    if (!isPresenceCounter(counter)) return false;
    for (const e of dcs.values()) if (e.p !== e.n) return false;
  }
  return true;
}
