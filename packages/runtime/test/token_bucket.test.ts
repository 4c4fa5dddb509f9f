import { describe, expect, test } from "vitest";
import { fullBucket, takeTokens, type BucketLimits } from "../src/token_bucket.js";

const LIMITS: BucketLimits = { ratePerS: 2, burst: 10 };
const T0 = 1_000_000;

describe("runtime - token bucket", () => {
  test("runtime - a full bucket holds the burst and gives it out at once", () => {
    const bucket = fullBucket(LIMITS, T0);
    expect(bucket).toEqual({ tokens: 10, refilledAt: T0 });
    expect(takeTokens(bucket, 4, LIMITS, T0)).toBe(0);
    expect(takeTokens(bucket, 6, LIMITS, T0)).toBe(0);
    expect(bucket.tokens).toBe(0);
  });

  test("runtime - a refused take costs nothing and says how many seconds until it would pass", () => {
    const bucket = fullBucket(LIMITS, T0);
    takeTokens(bucket, 9, LIMITS, T0);
    // 1 token left, 5 needed: 4 more at 2 a second.
    expect(takeTokens(bucket, 5, LIMITS, T0)).toBe(2);
    expect(bucket.tokens).toBe(1);
    // 3 more needed: 1.5 s, rounded up.
    expect(takeTokens(bucket, 4, LIMITS, T0)).toBe(2);
    // Half a token short: still at least a whole second.
    expect(takeTokens(bucket, 1.5, LIMITS, T0)).toBe(1);
  });

  test("runtime - tokens refill at the rate, never past the burst", () => {
    const bucket = fullBucket(LIMITS, T0);
    takeTokens(bucket, 10, LIMITS, T0);
    expect(takeTokens(bucket, 3, LIMITS, T0 + 1_000)).toBe(1);
    expect(bucket).toEqual({ tokens: 2, refilledAt: T0 + 1_000 });
    expect(takeTokens(bucket, 3, LIMITS, T0 + 1_500)).toBe(0);
    expect(bucket.tokens).toBe(0);
    takeTokens(bucket, 0, LIMITS, T0 + 3_600_000);
    expect(bucket.tokens).toBe(10);
  });

  test("runtime - a clock that goes back refills nothing and takes nothing", () => {
    const bucket = fullBucket(LIMITS, T0);
    takeTokens(bucket, 6, LIMITS, T0);
    expect(takeTokens(bucket, 4, LIMITS, T0 - 60_000)).toBe(0);
    expect(bucket).toEqual({ tokens: 0, refilledAt: T0 - 60_000 });
  });
});
