import { describe, expect, test } from "vitest";
import { mulberry32 } from "../../../test/support/prng.js";
import { HLL_MAX_RANK, HLL_REGISTERS, estimateDistinct, registerOf } from "../src/hyperloglog.js";

/**
 * The registers of `n` distinct items, drawn without hashing them one by one: a register that saw k
 * items holds the largest of k ranks, at most r with probability (1 - 2^-r)^k (r <= 32), else 33.
 */
function registersOf(n: number, next: () => number): Map<number, number> {
  const perRegister = n / HLL_REGISTERS;
  const ranks = new Map<number, number>();
  for (let i = 0; i < HLL_REGISTERS; i++) {
    const u = next();
    let rank = 1;
    while (rank < HLL_MAX_RANK && u > Math.exp(perRegister * Math.log1p(-(2 ** -rank)))) rank++;
    ranks.set(i, rank);
  }
  return ranks;
}

describe("crdt - hyperloglog", () => {
  test("crdt - the first hash picks the register by its top 12 bits, the lowest set bit of the second is the rank, none at all the largest", () => {
    expect(registerOf(0xffffffff, 1)).toEqual({ index: HLL_REGISTERS - 1, rank: 1 });
    expect(registerOf(0x00100000, 0b100)).toEqual({ index: 1, rank: 3 });
    expect(registerOf(0, 0x80000000)).toEqual({ index: 0, rank: 32 });
    expect(registerOf(0, 0)).toEqual({ index: 0, rank: HLL_MAX_RANK });
  });

  test("crdt - 10^10 to 10^14 distinct items, up to nearly every register at the largest rank, are estimated within 3 standard errors", () => {
    const seed = 20261130;
    const { next } = mulberry32(seed);
    for (const n of [2 ** 36, 2 ** 40, 2 ** 42, 2 ** 44, 2 ** 45, 2 ** 46]) {
      const ranks = registersOf(n, next);
      const atTop = [...ranks.values()].filter((r) => r === HLL_MAX_RANK).length;
      const error = Math.abs(estimateDistinct(ranks) / n - 1);
      expect(error, `seed ${seed}, ${n} items, ${atTop} registers at the largest rank`).toBeLessThan(
        3 * (1.04 / Math.sqrt(HLL_REGISTERS)),
      );
    }
  });

  test("crdt - no registers estimate none, and every register at the largest rank estimates past any count", () => {
    expect(estimateDistinct(new Map())).toBe(0);
    const saturated = new Map(Array.from({ length: HLL_REGISTERS }, (_, i) => [i, HLL_MAX_RANK]));
    expect(estimateDistinct(saturated)).toBe(Infinity);
  });
});
