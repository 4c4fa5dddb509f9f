/** The memory store's page listing: ids of pages with at least one entry, sorted, listed by prefix. */
import type { PageList } from "./store.js";
import { listStart } from "./validate.js";

export class SortedPageIds {
  readonly #ids: string[] = [];

  add(page: string): void {
    this.#ids.splice(lowerBound(this.#ids, page), 0, page);
  }

  remove(page: string): void {
    this.#ids.splice(lowerBound(this.#ids, page), 1);
  }

  /** Store.listPages over these ids. */
  list(prefix: string, cursor: string | undefined, limit: number): PageList {
    const { from, exclusive } = listStart(prefix, cursor);
    const ids = this.#ids;
    let i = lowerBound(ids, from);
    if (exclusive && ids[i] === from) i++;
    const pages: string[] = [];
    for (; i < ids.length && pages.length < limit; i++) {
      const id = ids[i]!;
      if (!id.startsWith(prefix)) break;
      pages.push(id);
    }
    const more = i < ids.length && ids[i]!.startsWith(prefix);
    return { pages, cursor: more ? pages.at(-1) : undefined };
  }
}

/** Index of the first id not less than `id` in the sorted `ids`. */
function lowerBound(ids: readonly string[], id: string): number {
  let lo = 0;
  let hi = ids.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ids[mid]! < id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
