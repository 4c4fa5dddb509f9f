/**
 * What this gateway holds of one viewer on one page, as its owner is told: how many of the
 * gateway's sockets count as the viewer there, and whether any of them is active (a visible tab).
 */
export interface Hold {
  readonly sockets: number;
  readonly active: boolean;
}

/** Sockets of one viewer on one page here, and how many of them are active. */
interface Sockets {
  open: number;
  active: number;
}

function holdOf(s: Sockets): Hold {
  return { sockets: s.open, active: s.active > 0 };
}

/**
 * This gateway's viewers per page: how many of its sockets each viewer has open there, and how many
 * of those are active. Every change comes out as the viewer's new `Hold` (undefined once its last
 * socket here is gone), which is what the page's owner is told.
 */
export class LocalPresence {
  readonly #pages = new Map<string, Map<string, Sockets>>();

  /** Counts one more socket of `viewer` on `page`; returns what the gateway now holds of it. */
  add(page: string, viewer: string, active: boolean): Hold {
    let viewers = this.#pages.get(page);
    if (viewers === undefined) this.#pages.set(page, (viewers = new Map()));
    let s = viewers.get(viewer);
    if (s === undefined) viewers.set(viewer, (s = { open: 0, active: 0 }));
    s.open++;
    if (active) s.active++;
    return holdOf(s);
  }

  /**
   * Counts one socket less (`active`: whether that socket was); returns what the gateway still holds
   * of the viewer, undefined when that was its last socket here (or it held none).
   */
  remove(page: string, viewer: string, active: boolean): Hold | undefined {
    const viewers = this.#pages.get(page);
    const s = viewers?.get(viewer);
    if (viewers === undefined || s === undefined) return undefined;
    if (s.open > 1) {
      s.open--;
      if (active && s.active > 0) s.active--;
      return holdOf(s);
    }
    viewers.delete(viewer);
    if (viewers.size === 0) this.#pages.delete(page);
    return undefined;
  }

  /**
   * One socket of the viewer, counted here, became active or inactive (it was not before); returns
   * what the gateway now holds of the viewer when whether it is active changed, else undefined.
   */
  setActive(page: string, viewer: string, active: boolean): Hold | undefined {
    const s = this.#pages.get(page)?.get(viewer);
    if (s === undefined) return undefined;
    const was = s.active > 0;
    s.active += active ? 1 : -1;
    return was === s.active > 0 ? undefined : holdOf(s);
  }

  /** Whether any socket here counts as `viewer` on `page`. */
  has(page: string, viewer: string): boolean {
    return this.#pages.get(page)?.has(viewer) === true;
  }

  viewersOf(page: string): string[] {
    return [...(this.#pages.get(page)?.keys() ?? [])];
  }

  /** Every viewer held on `page` with what the gateway holds of it (a resync). */
  holdsOf(page: string): Array<[string, Hold]> {
    return [...(this.#pages.get(page) ?? [])].map(([viewer, s]) => [viewer, holdOf(s)]);
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
