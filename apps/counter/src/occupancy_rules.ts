/**
 * When a page's viewers make an occupancy event (docs/protocol.md, "Webhooks"). Pure: a level and a
 * new total in, the level after it and the transitions on the way out; no time, no I/O.
 */

/** Where a page stands: occupied or not, and how many thresholds (from the lowest) it is above. */
export interface Level {
  readonly occupied: boolean;
  /** Thresholds crossed upwards and not back down: always the lowest ones, so a count is enough. */
  readonly crossed: number;
}

export type Transition =
  | { readonly type: "page.occupied" }
  | { readonly type: "page.vacated" }
  | { readonly type: "page.threshold"; readonly threshold: number; readonly direction: "up" | "down" };

export const VACANT: Level = { occupied: false, crossed: 0 };

export class OccupancyRules {
  readonly #thresholds: readonly number[];
  /** Per threshold, the total below which it is crossed back down. */
  readonly #downBelow: readonly number[];

  /**
   * `thresholds` ascending positive integers; `hysteresisPct` the share of a threshold (rounded up)
   * a page must fall below it before `down`, at most threshold - 1 so that a page that empties is
   * below every threshold. 0: `down` as soon as the page is below the threshold.
   */
  constructor(thresholds: readonly number[], hysteresisPct: number) {
    this.#thresholds = thresholds;
    this.#downBelow = thresholds.map((t) => t - Math.min(t - 1, Math.ceil((t * hysteresisPct) / 100)));
  }

  /** The level of a page first seen with `viewers` (loaded, or taken over): nothing is announced for it. */
  initial(viewers: number): Level {
    return this.step(VACANT, viewers).level;
  }

  /**
   * The level after the page's viewers became `viewers`, with every transition from `level` in the
   * order a receiver must see them: going up, `occupied` then thresholds ascending; going down,
   * thresholds descending then `vacated`.
   */
  step(level: Level, viewers: number): { readonly level: Level; readonly transitions: Transition[] } {
    const transitions: Transition[] = [];
    let { occupied, crossed } = level;
    if (!occupied && viewers > 0) {
      occupied = true;
      transitions.push({ type: "page.occupied" });
    }
    while (crossed < this.#thresholds.length && viewers >= this.#thresholds[crossed]!) {
      transitions.push({ type: "page.threshold", threshold: this.#thresholds[crossed]!, direction: "up" });
      crossed++;
    }
    while (crossed > 0 && viewers < this.#downBelow[crossed - 1]!) {
      crossed--;
      transitions.push({ type: "page.threshold", threshold: this.#thresholds[crossed]!, direction: "down" });
    }
    if (occupied && viewers === 0) {
      occupied = false;
      transitions.push({ type: "page.vacated" });
    }
    return { level: transitions.length === 0 ? level : { occupied, crossed }, transitions };
  }
}
