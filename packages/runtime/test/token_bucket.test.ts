import { describe, expect, test } from "vitest";
import {
  FULL_BUCKET_AT,
  fullBucket,
  takeTokens,
  takeTokensAt,
  type BucketLimits,
} from "../src/token_bucket.js";

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

describe("runtime - token bucket in one number", () => {
  /** Takes one token at each of `times`; which were allowed. */
  function takes(limits: BucketLimits, times: readonly number[]): boolean[] {
    let fullAt = FULL_BUCKET_AT;
    return times.map((now) => {
      const next = takeTokensAt(fullAt, 1, limits, now);
      if (next !== undefined) fullAt = next;
      return next !== undefined;
    });
  }

  test("runtime - a bucket in one number gives out exactly the burst at one instant", () => {
    for (const limits of [LIMITS, { ratePerS: 3, burst: 3 }, { ratePerS: 7, burst: 13 }]) {
      const allowed = takes(
        limits,
        Array.from({ length: limits.burst + 5 }, () => T0 + 0.5),
      );
      expect(allowed.filter(Boolean)).toHaveLength(limits.burst);
      expect(allowed.slice(limits.burst)).toEqual([false, false, false, false, false]);
    }
  });

  test("runtime - a bucket in one number refills at the rate, never past the burst", () => {
    let fullAt = FULL_BUCKET_AT;
    for (let i = 0; i < 10; i++) fullAt = takeTokensAt(fullAt, 1, LIMITS, T0)!;
    expect(takeTokensAt(fullAt, 1, LIMITS, T0)).toBeUndefined();
    // 2 tokens a second: one second later, two takes pass and the third does not.
    fullAt = takeTokensAt(fullAt, 1, LIMITS, T0 + 1_000)!;
    fullAt = takeTokensAt(fullAt, 1, LIMITS, T0 + 1_000)!;
    expect(takeTokensAt(fullAt, 1, LIMITS, T0 + 1_000)).toBeUndefined();
    // An hour later it is full again: the burst, and no more.
    const later = T0 + 3_600_000;
    const allowed = takes(
      LIMITS,
      Array.from({ length: 12 }, () => later),
    );
    expect(allowed.filter(Boolean)).toHaveLength(10);
  });

  test("runtime - a bucket in one number agrees with the pair of numbers on a random schedule", () => {
    const seed = 20261123;
    console.log(`token bucket schedule seed ${seed}`);
    let x = seed;
    const random = (): number => (x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const limits = { ratePerS: 20, burst: 40 };
    const pair = fullBucket(limits, T0);
    let fullAt = FULL_BUCKET_AT;
    let now = T0;
    for (let i = 0; i < 5_000; i++) {
      now += Math.floor(random() * 120);
      const next = takeTokensAt(fullAt, 1, limits, now);
      expect(next !== undefined).toBe(takeTokens(pair, 1, limits, now) === 0);
      if (next !== undefined) fullAt = next;
    }
  });
});
