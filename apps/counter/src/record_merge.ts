/**
 * Which entries of a page record another DC holds advance what this store holds: the pure step of
 * merging anti-entropy entries into pages that are not in memory.
 */
import { entryAdvances, mergeEntry, type Entry } from "@livecount/crdt";
import type { PageRecord } from "@livecount/store";

/** Entries of `incoming` that advance `local`, merged (per-field max), by data center then counter. */
export function advancing(local: PageRecord, incoming: PageRecord): Map<string, Record<string, Entry>> {
  const byDc = new Map<string, Array<[string, Entry]>>();
  for (const [counter, entries] of Object.entries(incoming)) {
    const held = Object.hasOwn(local, counter) ? local[counter] : undefined;
    for (const [dc, entry] of Object.entries(entries)) {
      const mine = held !== undefined && Object.hasOwn(held, dc) ? held[dc] : undefined;
      if (!entryAdvances(mine, entry)) continue;
      let list = byDc.get(dc);
      if (list === undefined) byDc.set(dc, (list = []));
      list.push([counter, mine === undefined ? entry : mergeEntry(mine, entry)]);
    }
  }
  // fromEntries defines own properties: a counter named "__proto__" stays a counter.
  return new Map([...byDc].map(([dc, list]) => [dc, Object.fromEntries(list)]));
}
