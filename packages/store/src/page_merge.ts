/** What both stores share to merge another DC's records of pages (`Store.mergePages`). */
import type { Entry } from "@livecount/crdt";
import { isPresenceCounter } from "./digest.js";
import type { EntryWrite, PageRecord } from "./store.js";

/** The entry `mergePages` indexes (this DC's presence). */
export interface IndexedEntry {
  readonly counter: string;
  readonly dc: string;
}

/** Every entry of the pages' records as writes, the indexed one marked. */
export function pageWrites(pages: ReadonlyMap<string, PageRecord>, indexed: IndexedEntry): EntryWrite[] {
  const writes: EntryWrite[] = [];
  for (const [page, record] of pages) {
    for (const [counter, entries] of Object.entries(record)) {
      for (const [dc, entry] of Object.entries(entries)) {
        const isIndexed = counter === indexed.counter && dc === indexed.dc;
        writes.push({ page, counter, dc, entry, indexed: isIndexed });
      }
    }
  }
  return writes;
}

/** A record whose every entry is presence at zero: it says no more than no record. */
export function onlyZeroPresence(record: PageRecord): boolean {
  for (const [counter, entries] of Object.entries(record)) {
    if (!isPresenceCounter(counter)) return false;
    for (const entry of Object.values(entries)) if (entry.p !== entry.n) return false;
  }
  return true;
}

/** Tombstones are the counters `@del:<counter>` (visibility.ts in the protocol package). */
const TOMBSTONE_PREFIX = "@del:";

/**
 * Whether a deleted counter may be purged: written in one data center at most, that entry zero
 * (`{z, z}`), and its activity (`2z`) exactly the tombstone's (the largest p): no change since the
 * delete, and no entry the delete saw missing here. Returns `z`, what the purge floor must reach, or
 * undefined when it must stay (docs/architecture.md, "Purging tombstones").
 */
export function purgeableAt(entries: Iterable<Entry>, tombstone: Iterable<Entry>): number | undefined {
  let deletedAt = 0;
  for (const e of tombstone) deletedAt = Math.max(deletedAt, e.p);
  let z: number | undefined;
  for (const e of entries) {
    if (z !== undefined || e.p !== e.n) return undefined;
    z = e.p;
  }
  return 2 * (z ?? 0) === deletedAt ? (z ?? 0) : undefined;
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
    if (!name.startsWith(TOMBSTONE_PREFIX)) continue;
    const counter = name.slice(TOMBSTONE_PREFIX.length);
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

/** Records of pages built entry by entry (what `mergePages` returns). */
export class RecordsBuilder {
  readonly #pages = new Map<string, Map<string, Array<[string, Entry]>>>();

  add(page: string, counter: string, dc: string, entry: Entry): void {
    let counters = this.#pages.get(page);
    if (counters === undefined) this.#pages.set(page, (counters = new Map()));
    let entries = counters.get(counter);
    if (entries === undefined) counters.set(counter, (entries = []));
    entries.push([dc, entry]);
  }

  build(): Map<string, PageRecord> {
    const records = new Map<string, PageRecord>();
    for (const [page, counters] of this.#pages) {
      // fromEntries defines own properties: a counter named "__proto__" stays a counter.
      const record = Object.fromEntries(
        [...counters].map(([counter, list]) => [counter, Object.fromEntries(list)]),
      );
      records.set(page, record);
    }
    return records;
  }
}
