import type { PagePresence } from "./page_presence.js";
import type { PageSeries } from "./page_series.js";

/**
 * Which arriving viewers of one page count as unique visitors. A gateway names the viewers whose
 * client address had spent its budget of new ids (`unvisited` on a presence batch or a resync):
 * they count as viewers, never as visitors, neither when they arrive nor in a new day's count of
 * everyone present.
 */
export class PageVisitors {
  readonly #series: PageSeries;
  readonly #presence: PagePresence;
  /** While a batch or a resync is applied: its viewers that do not count as visitors. */
  #batch: ReadonlySet<string> | undefined;
  /**
   * Viewers that arrived unvisited and may still count here. Made at the first (most pages never
   * have one), and pruned to the viewers present whenever it outgrows them, so a script cycling
   * ids cannot grow it.
   */
  #notVisitors: Set<string> | undefined;
  /** What the series counts as everyone present on a new day: the present viewers but those. */
  readonly #visitorsPresent = {
    viewers: (): Iterable<string> => {
      const notVisitors = this.#notVisitors;
      const present = this.#presence.viewers();
      return notVisitors === undefined || notVisitors.size === 0
        ? present
        : [...present].filter((v) => !notVisitors.has(v));
    },
  };

  constructor(series: PageSeries, presence: PagePresence) {
    this.#series = series;
    this.#presence = presence;
  }

  /** Runs `apply` (a batch or a resync) with `unvisited` as its arrivals that are not visitors. */
  applying(unvisited: ReadonlySet<string> | undefined, apply: () => void): void {
    this.#batch = unvisited;
    try {
      apply();
    } finally {
      this.#batch = undefined;
    }
  }

  /**
   * A viewer arrived (or none: the day may have turned), at `now`; `counting` is false while the
   * actor cannot count yet (it loads). True when a register of the day rose: something to write.
   */
  visited(arrived: string | undefined, counting: boolean, now: number): boolean {
    if (arrived !== undefined) {
      if (this.#batch?.has(arrived) === true) {
        (this.#notVisitors ??= new Set()).add(arrived);
        arrived = undefined;
      } else this.#notVisitors?.delete(arrived);
    }
    return counting && this.#series.visitor(arrived, this.#visitorsPresent, now);
  }

  /** Presence changed: the viewers kept as not visitors shrink to those present once they outnumber them. */
  presenceChanged(): void {
    const notVisitors = this.#notVisitors;
    if (notVisitors === undefined || notVisitors.size <= this.#presence.count) return;
    for (const viewer of notVisitors) if (!this.#presence.has(viewer)) notVisitors.delete(viewer);
  }
}
