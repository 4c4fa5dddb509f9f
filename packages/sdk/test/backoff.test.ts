import { describe, expect, test } from "vitest";
import { fullJitterMs, parseRetryAfter, reconnectDelayMs, retryOptions } from "../src/backoff.js";
import { newIdempotencyKey } from "../src/ids.js";
import { mulberry32, testSeed } from "../../../test/support/prng.js";

describe("sdk - backoff", () => {
  test("sdk - full jitter stays within [0, min(max, base * 2^n)) and spreads over it", () => {
    const random = mulberry32(testSeed("sdk full jitter")).next;
    for (let n = 0; n < 12; n++) {
      const cap = Math.min(5000, 100 * 2 ** n);
      const delays = Array.from({ length: 400 }, () => fullJitterMs(n, 100, 5000, random));
      expect(Math.min(...delays)).toBeGreaterThanOrEqual(0);
      expect(Math.max(...delays)).toBeLessThan(cap);
      // Jitter, not a fixed delay: both halves of the range are used.
      expect(delays.some((d) => d < cap / 2) && delays.some((d) => d >= cap / 2)).toBe(true);
    }
    expect(fullJitterMs(1000, 100, 5000, () => 0.999)).toBeLessThan(5000);
  });

  test("sdk - a reconnect waits no longer than the outage has lasted, and at least as long as the doubling would allow otherwise", () => {
    const random = mulberry32(testSeed("sdk reconnect delay")).next;
    // A short outage: after many quick failures the cap is the time spent down, not base * 2^n.
    for (const downMs of [0, 100, 600, 1500]) {
      const delays = Array.from({ length: 400 }, () => reconnectDelayMs(12, downMs, 250, 10_000, random));
      const cap = Math.max(250, downMs);
      expect(Math.max(...delays)).toBeLessThan(cap);
      expect(delays.some((d) => d >= cap / 2)).toBe(true);
    }
    // A long outage backs off as before: the doubling and the maximum bound the delay.
    expect(reconnectDelayMs(2, 60_000, 250, 10_000, () => 0.999)).toBe(Math.floor(0.999 * 1000));
    expect(reconnectDelayMs(30, 60_000, 250, 10_000, () => 0.999)).toBe(Math.floor(0.999 * 10_000));
    expect(reconnectDelayMs(0, 0, 250, 10_000, () => 0.5)).toBe(125);
  });

  test("sdk - Retry-After in seconds or as an HTTP date", () => {
    expect(parseRetryAfter("1")).toBe(1000);
    expect(parseRetryAfter("0")).toBe(0);
    expect(parseRetryAfter(null)).toBeUndefined();
    expect(parseRetryAfter("soon")).toBeUndefined();
    const now = Date.parse("2030-01-01T00:00:00Z");
    expect(parseRetryAfter("Tue, 01 Jan 2030 00:00:03 GMT", now)).toBe(3000);
  });

  test("sdk - retry options are checked and defaulted", () => {
    expect(retryOptions(undefined)).toEqual({ attempts: 6, baseMs: 100, maxMs: 5000 });
    expect(retryOptions({ attempts: 1 })).toMatchObject({ attempts: 1 });
    expect(() => retryOptions({ attempts: 0 })).toThrow(RangeError);
    expect(() => retryOptions({ baseMs: 10, maxMs: 5 })).toThrow(RangeError);
  });

  test("sdk - idempotency keys are random v4 UUIDs, also without crypto.randomUUID", () => {
    const keys = new Set(Array.from({ length: 1000 }, () => newIdempotencyKey()));
    expect(keys.size).toBe(1000);
    const original = globalThis.crypto.randomUUID;
    try {
      Object.defineProperty(globalThis.crypto, "randomUUID", { value: undefined, configurable: true });
      const key = newIdempotencyKey();
      expect(key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    } finally {
      Object.defineProperty(globalThis.crypto, "randomUUID", { value: original, configurable: true });
    }
  });
});
