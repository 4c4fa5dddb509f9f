/**
 * The memory store's purge of settled deletes (Store.purgeTombstones), over one partition: which
 * deleted counters of the candidate pages go, which stay, and the purge floor after.
 */
import { deletedCounterOf, purgeableAt } from "./digest.js";
import type { PageEntries } from "./memory_digests.js";
import { isTombstone } from "./page_merge.js";
import type { PurgeResult } from "./store.js";

/** The partition the purge works on, as the store holds it. */
export interface PurgeScope {
  readonly pages: ReadonlyMap<string, PageEntries>;
  /** Pages with a tombstone -> when one last changed (the candidates); a page done with leaves it. */
  readonly tombs: Map<string, number> | undefined;
  /** The partition's purge floor before the purge. */
  readonly floor: number;
  /** Removes one entry of a settled delete (the page with its last entry). */
  removeEntry(page: string, counter: string, dc: string): void;
  /** A page purged from that still holds entries: its emptiness may have changed. */
  touched(page: string): void;
}

export function purgeSettled(
  scope: PurgeScope,
  deletedBefore: number,
  offset: number,
  limit: number,
): PurgeResult {
  const due = [...(scope.tombs ?? [])]
    .filter(([, at]) => at <= deletedBefore)
    .sort((a, b) => a[1] - b[1] || (a[0] < b[0] ? -1 : 1));
  let floor = scope.floor;
  let kept = 0;
  let stay = 0;
  const purged: Array<{ page: string; counters: string[] }> = [];
  for (const [page] of due.slice(offset, offset + limit)) {
    const counters = scope.pages.get(page)!;
    const gone: string[] = [];
    let left = false;
    for (const [name, tomb] of [...counters]) {
      if (!isTombstone(name)) continue;
      const counter = deletedCounterOf(name)!;
      const at = purgeableAt(counters.get(counter)?.values() ?? [], tomb.values());
      if (at === undefined) {
        kept++;
        left = true;
        continue;
      }
      floor = Math.max(floor, at);
      for (const c of [counter, name])
        for (const dc of [...(counters.get(c)?.keys() ?? [])]) scope.removeEntry(page, c, dc);
      gone.push(counter);
    }
    if (left) stay++;
    else scope.tombs!.delete(page);
    if (gone.length > 0) purged.push({ page, counters: gone });
    if (scope.pages.has(page)) scope.touched(page);
  }
  const next = offset + limit < due.length ? offset + stay : undefined;
  return { purged, kept, floor, next };
}
