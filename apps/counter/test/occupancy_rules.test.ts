import { describe, expect, test } from "vitest";
import { mulberry32, testSeed } from "../../../test/support/prng.js";
import { OccupancyRules, VACANT, type Level, type Transition } from "../src/occupancy_rules.js";

/** The transitions of a walk through `totals`, from a vacant page. */
function walk(rules: OccupancyRules, totals: readonly number[]): Transition[] {
  let level: Level = VACANT;
  const out: Transition[] = [];
  for (const viewers of totals) {
    const step = rules.step(level, viewers);
    level = step.level;
    out.push(...step.transitions);
  }
  return out;
}

const up = (threshold: number): Transition => ({ type: "page.threshold", threshold, direction: "up" });
const down = (threshold: number): Transition => ({ type: "page.threshold", threshold, direction: "down" });
const OCCUPIED: Transition = { type: "page.occupied" };
const VACATED: Transition = { type: "page.vacated" };

describe("counter - occupancy rules", () => {
  test("counter - a page is occupied by its first viewer and vacated by its last, and nothing in between moves it", () => {
    const rules = new OccupancyRules([], 10);
    expect(walk(rules, [0, 1, 2, 7, 1, 0, 0])).toEqual([OCCUPIED, VACATED]);
    expect(walk(rules, [3, 0, 1, 0])).toEqual([OCCUPIED, VACATED, OCCUPIED, VACATED]);
  });

  test("counter - a threshold is crossed up at its value and down only below the hysteresis band, not at it", () => {
    const rules = new OccupancyRules([100], 10);
    // Up at exactly 100; 99..90 are inside the band; 89 is below it.
    expect(walk(rules, [99])).toEqual([OCCUPIED]);
    expect(walk(rules, [99, 100])).toEqual([OCCUPIED, up(100)]);
    expect(walk(rules, [100, 99, 100, 90, 100, 90])).toEqual([OCCUPIED, up(100)]);
    expect(walk(rules, [100, 90, 89, 99, 100])).toEqual([OCCUPIED, up(100), down(100), up(100)]);
  });

  test("counter - without hysteresis a threshold is crossed down as soon as the page is below it", () => {
    const rules = new OccupancyRules([100], 0);
    expect(walk(rules, [100, 99, 100])).toEqual([OCCUPIED, up(100), down(100), up(100)]);
  });

  test("counter - the band never reaches zero viewers: a page that empties is below every threshold", () => {
    // 50 % of 1 and of 2 round up to 1: the band is capped at threshold - 1.
    const rules = new OccupancyRules([1, 2], 50);
    expect(walk(rules, [2, 1])).toEqual([OCCUPIED, up(1), up(2)]);
    expect(walk(rules, [2, 1, 0])).toEqual([OCCUPIED, up(1), up(2), down(2), down(1), VACATED]);
  });

  test("counter - a jump crosses every threshold on the way, up in ascending order after occupied, down in descending order before vacated", () => {
    const rules = new OccupancyRules([100, 1000], 10);
    const transitions = walk(rules, [1500, 0]);
    expect(transitions).toEqual([OCCUPIED, up(100), up(1000), down(1000), down(100), VACATED]);
    expect(rules.step(VACANT, 50).transitions).toEqual([OCCUPIED]);
  });

  test("counter - a page first seen with viewers starts at their level, announcing nothing", () => {
    const rules = new OccupancyRules([100, 1000], 10);
    expect(rules.initial(0)).toEqual(VACANT);
    expect(rules.initial(150)).toEqual({ occupied: true, crossed: 1 });
    expect(rules.step(rules.initial(150), 150).transitions).toEqual([]);
    // Inside a band, a page first seen is below the threshold: it was never announced above it.
    expect(rules.initial(95)).toEqual({ occupied: true, crossed: 0 });
  });

  test("counter - a receiver replaying the events of any walk knows the page's level at every step", () => {
    const rnd = mulberry32(testSeed("occupancy rules walk"));
    const thresholds = [3, 10, 25];
    const rules = new OccupancyRules(thresholds, 20);
    let level: Level = VACANT;
    let occupied = false;
    const above = new Set<number>();
    let viewers = 0;
    for (let i = 0; i < 5_000; i++) {
      viewers = rnd.chance(0.05) ? 0 : Math.max(0, viewers + rnd.int(11) - 5);
      const step = rules.step(level, viewers);
      level = step.level;
      for (const t of step.transitions) {
        if (t.type === "page.occupied") occupied = true;
        else if (t.type === "page.vacated") occupied = false;
        else if (t.direction === "up") above.add(t.threshold);
        else above.delete(t.threshold);
      }
      expect(occupied).toBe(viewers > 0);
      expect([...above].sort((a, b) => a - b)).toEqual(thresholds.slice(0, level.crossed));
      // Above a threshold means it was reached and not left below its band since.
      for (const t of thresholds) if (viewers >= t) expect(above.has(t)).toBe(true);
    }
  });
});
