/** What both stores share to merge another DC's records of pages (`Store.mergePages`). */
import type { Entry } from "@livecount/crdt";
import {
  TOMBSTONE_PREFIX,
  deletedCounterOf,
  isPresenceCounter,
  isVisitRecord,
  purgeableAt,
} from "./digest.js";
import type { EntryWrite, PageRecord } from "./store.js";

/** Every entry of the pages' records as writes, `indexedDc`'s presence entries marked as indexed. */
export function pageWrites(pages: ReadonlyMap<string, PageRecord>, indexedDc: string): EntryWrite[] {
  const writes: EntryWrite[] = [];
  for (const [page, record] of pages) {
    for (const [counter, entries] of Object.entries(record)) {
      for (const [dc, entry] of Object.entries(entries)) {
        const isIndexed = dc === indexedDc && isPresenceCounter(counter);
        writes.push({ page, counter, dc, entry, indexed: isIndexed });
      }
    }
  }
  return writes;
}

/**
 * A record whose every entry is presence at zero or a visit record: an empty page, which a store
 * that does not hold it has removed or never needed (Store.removeEmptyPages).
 */
export function onlyZeroPresence(record: PageRecord): boolean {
  for (const [counter, entries] of Object.entries(record)) {
    if (isVisitRecord(counter)) continue;
    if (!isPresenceCounter(counter)) return false;
    for (const entry of Object.values(entries)) if (entry.p !== entry.n) return false;
  }
  return true;
}

/**
 * The counters (each with its tombstone) of a record that `mergePages` leaves out as a purged
 * counter's remains: deleted, held in no form by the store (`holds`), purgeable in the record, and
 * with its entry not above the partition's purge floor.
 */
export function purgedRemains(
  record: PageRecord,
  holds: (counter: string) => boolean,
  floor: number,
): Set<string> {
  const left = new Set<string>();
  for (const [name, tomb] of Object.entries(record)) {
    const counter = deletedCounterOf(name);
    if (counter === undefined) continue;
    if (holds(counter) || holds(name)) continue;
    const entries = Object.hasOwn(record, counter) ? Object.values(record[counter]!) : [];
    const at = purgeableAt(entries, Object.values(tomb));
    if (at !== undefined && at <= floor) left.add(counter).add(name);
  }
  return left;
}

/** True for a tombstone counter's name. */
export function isTombstone(counter: string): boolean {
  return counter.startsWith(TOMBSTONE_PREFIX);
}

/**
 * Adds `dc`'s entry of `counter` to a page's record, the counter's entries made when it has none
 * yet. Keys are own properties even when named "__proto__" (a plain assignment would set the
 * prototype instead): no counter or DC id is lost or turned into something else.
 */
export function addToRecord(record: PageRecord, counter: string, dc: string, entry: Entry): void {
  let entries = Object.hasOwn(record, counter) ? record[counter] : undefined;
  if (entries === undefined) setOwn(record, counter, (entries = {}));
  setOwn(entries, dc, entry);
}

function setOwn<T>(out: Record<string, T>, key: string, value: T): void {
  if (key === "__proto__") {
    Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  } else {
    out[key] = value;
  }
}

/** Records of pages built entry by entry (what `mergePages` returns). */
export class RecordsBuilder {
  readonly #pages = new Map<string, PageRecord>();

  add(page: string, counter: string, dc: string, entry: Entry): void {
    let record = this.#pages.get(page);
    if (record === undefined) this.#pages.set(page, (record = {}));
    addToRecord(record, counter, dc, entry);
  }

  build(): Map<string, PageRecord> {
    return this.#pages;
  }
}
