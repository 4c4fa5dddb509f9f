import { expect, test } from "vitest";
import { ManualClock } from "./manual_clock.js";

/**
 * Time stays whole milliseconds, as Date.now() reads, whatever delay a timer asks for: a partition
 * renewal every 8000 / 3 ms made now() fractional in what ran then, and a counter node stamped a
 * reply with it, which the protocol refuses (a timestamp is a whole number).
 */
test("manual clock - a timer of a fractional delay fires at the next whole millisecond, and now() stays whole", async () => {
  const clock = new ManualClock(1_800_000_000_000);
  const seen: number[] = [];
  const renew = (): void => {
    seen.push(clock.now());
    clock.setTimeout(renew, 8000 / 3);
  };
  clock.setTimeout(renew, 8000 / 3);
  await clock.advance(10_000);
  expect(seen).toEqual([2667, 5334, 8001].map((ms) => 1_800_000_000_000 + ms));
  expect(Number.isInteger(clock.now())).toBe(true);
});
