import { FULL_BUCKET_AT, type BucketFullAt } from "@livecount/runtime";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { FrameBudget } from "../src/frame_budget.js";

const LIMITS = { ratePerS: 10, burst: 5 };

/** Takes tokens from `bucket` until it is empty: how many it gave, and the bucket after. */
function drain(budget: FrameBudget, bucket: BucketFullAt): { taken: number; bucket: BucketFullAt } {
  let taken = 0;
  for (let next = budget.take(bucket); next !== undefined; next = budget.take(bucket)) {
    bucket = next;
    taken++;
  }
  return { taken, bucket };
}

describe("gateway - frame budget", () => {
  test("gateway - a socket's bucket refills at the rate after the wall clock steps back, as if it had not", () => {
    const clock = new ManualClock();
    const budget = new FrameBudget(LIMITS, clock);
    let { taken, bucket } = drain(budget, FULL_BUCKET_AT);
    expect(taken).toBe(LIMITS.burst);
    // The wall clock steps back a minute (NTP, a VM resumed): the bucket neither refuses every
    // frame for that minute nor hands out a minute's tokens; it goes on refilling from there.
    clock.jump(-60_000);
    expect(budget.take(bucket)).toBeUndefined();
    clock.jump(300);
    ({ taken, bucket } = drain(budget, bucket));
    expect(taken).toBe(3);
    clock.jump(10_000);
    expect(drain(budget, bucket).taken).toBe(LIMITS.burst);
  });
});
