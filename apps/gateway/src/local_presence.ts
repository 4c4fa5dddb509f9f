/**
 * This gateway's viewers per page: how many of its sockets each viewer has open there. Only the
 * transitions a page's owner cares about come out: a viewer's first socket on a page, and its last.
 */
export class LocalPresence {
  readonly #pages = new Map<string, Map<string, number>>();

  /** Counts one more socket of `viewer` on `page`; true when it is the viewer's first here. */
  add(page: string, viewer: string): boolean {
    let viewers = this.#pages.get(page);
    if (viewers === undefined) this.#pages.set(page, (viewers = new Map()));
    const sockets = viewers.get(viewer) ?? 0;
    viewers.set(viewer, sockets + 1);
    return sockets === 0;
  }

  /** Counts one socket less; true when it was the viewer's last here. */
  remove(page: string, viewer: string): boolean {
    const viewers = this.#pages.get(page);
    const sockets = viewers?.get(viewer);
    if (viewers === undefined || sockets === undefined) return false;
    if (sockets > 1) {
      viewers.set(viewer, sockets - 1);
      return false;
    }
    viewers.delete(viewer);
    if (viewers.size === 0) this.#pages.delete(page);
    return true;
  }

  /** Whether any socket here counts as `viewer` on `page`. */
  has(page: string, viewer: string): boolean {
    return this.#pages.get(page)?.has(viewer) === true;
  }

  viewersOf(page: string): string[] {
    return [...(this.#pages.get(page)?.keys() ?? [])];
  }

  pages(): IterableIterator<string> {
    return this.#pages.keys();
  }

  /** Distinct (page, viewer) pairs held here. */
  get size(): number {
    let n = 0;
    for (const viewers of this.#pages.values()) n += viewers.size;
    return n;
  }
}
