/**
 * What this gateway holds of one viewer on one page, as its owner is told: how many of the
 * gateway's sockets count as the viewer there, and whether any of them is active (a visible tab).
 */
export interface Hold {
  readonly sockets: number;
  readonly active: boolean;
}

/**
 * Sockets of one viewer on one page here and how many of them are active, in one number
 * (`open * SPAN + active`), negative when the viewer joined here without counting as a unique
 * visitor (its address had spent its budget of new ids, PresencePages.unvisited): a small integer
 * in a Map costs nothing more, an object per viewer would (the gateway keeps one per page and
 * viewer; idle viewers cost memory, issue 14).
 */
type Sockets = number;
/** More sockets than one process can open (LIVECOUNT_MAX_CONNECTIONS is far below). */
const SPAN = 2 ** 20;

const openOf = (s: Sockets): number => Math.floor(Math.abs(s) / SPAN);
const activeOf = (s: Sockets): number => Math.abs(s) % SPAN;
/** `s` changed by `delta` sockets or active sockets (SPAN, 1), keeping whether it is a visitor. */
const moved = (s: Sockets, delta: number): Sockets => (s < 0 ? s - delta : s + delta);

function holdOf(s: Sockets): Hold {
  return { sockets: openOf(s), active: activeOf(s) > 0 };
}

/**
 * This gateway's viewers per page: how many of its sockets each viewer has open there, and how many
 * of those are active. Every change comes out as the viewer's new `Hold` (undefined once its last
 * socket here is gone), which is what the page's owner is told.
 */
export class LocalPresence {
  readonly #pages = new Map<string, Map<string, Sockets>>();

  /**
   * Counts one more socket of `viewer` on `page`; returns what the gateway now holds of it. A viewer
   * not held yet arrives as a unique visitor or not (`visitor`); it stays so while held here.
   */
  add(page: string, viewer: string, active: boolean, visitor = true): Hold {
    let viewers = this.#pages.get(page);
    if (viewers === undefined) this.#pages.set(page, (viewers = new Map()));
    const held = viewers.get(viewer);
    const one = SPAN + (active ? 1 : 0);
    const s = held !== undefined ? moved(held, one) : visitor ? one : -one;
    viewers.set(viewer, s);
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
    if (openOf(s) > 1) {
      const left = moved(s, -SPAN - (active && activeOf(s) > 0 ? 1 : 0));
      viewers.set(viewer, left);
      return holdOf(left);
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
    const viewers = this.#pages.get(page);
    const s = viewers?.get(viewer);
    if (viewers === undefined || s === undefined) return undefined;
    const next = moved(s, active ? 1 : -1);
    viewers.set(viewer, next);
    return activeOf(s) > 0 === activeOf(next) > 0 ? undefined : holdOf(next);
  }

  /** Whether any socket here counts as `viewer` on `page`. */
  has(page: string, viewer: string): boolean {
    return this.#pages.get(page)?.has(viewer) === true;
  }

  /** Every viewer held on `page` with what the gateway holds of it (a resync). */
  holdsOf(page: string): Array<[string, Hold]> {
    return [...(this.#pages.get(page) ?? [])].map(([viewer, s]) => [viewer, holdOf(s)]);
  }

  /** Whether `viewer`, held on `page`, arrived here without counting as a unique visitor. */
  isUnvisited(page: string, viewer: string): boolean {
    return (this.#pages.get(page)?.get(viewer) ?? 0) < 0;
  }

  /** The viewers held on `page` that arrived here without counting as unique visitors (a resync). */
  unvisitedOf(page: string): string[] {
    const out: string[] = [];
    for (const [viewer, s] of this.#pages.get(page) ?? []) if (s < 0) out.push(viewer);
    return out;
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
