import { describe, expect, test } from "vitest";
import { mulberry32, testSeed } from "../../../test/support/prng.js";
import { Backoff, fullJitterMs } from "../src/backoff.js";

describe("runtime - backoff", () => {
  test("runtime - full jitter stays within [0, min(max, base * 2^n)) and spreads over it", () => {
    const seed = testSeed("runtime full jitter");
    const rnd = mulberry32(seed);
    for (let retry = 0; retry < 12; retry++) {
      const cap = Math.min(5_000, 100 * 2 ** retry);
      const delays = Array.from({ length: 400 }, () => fullJitterMs(retry, 100, 5_000, () => rnd.next()));
      expect(Math.min(...delays), `seed ${seed}`).toBeGreaterThanOrEqual(0);
      expect(Math.max(...delays), `seed ${seed}`).toBeLessThan(cap);
      // Spread: retries that failed together do not come back together.
      expect(Math.max(...delays) - Math.min(...delays), `seed ${seed}`).toBeGreaterThan(cap / 2);
    }
  });

  test("runtime - a backoff grows with each retry until reset, and never past its max", () => {
    const b = new Backoff(100, 1_000, () => 0.999_999);
    expect([b.next(), b.next(), b.next(), b.next(), b.next()]).toEqual([99, 199, 399, 799, 999]);
    b.reset();
    expect(b.next()).toBe(99);
  });

  test("runtime - a huge retry count neither overflows nor exceeds the max", () => {
    expect(fullJitterMs(10_000, 100, 5_000, () => 0.5)).toBe(2_500);
  });
});
