/**
 * When another DC is known to have held this store's tombstones for the purge grace: the latest
 * agreement a grace old or older, less 1 ms; nothing before any such agreement; per partition and
 * DC; forgotten with the partition.
 */
import { describe, expect, test } from "vitest";
import { TombAgreements } from "../src/tomb_agreements.js";

const GRACE_MS = 1_000;

describe("counter - tombstone agreements", () => {
  test("counter - a tombstone counts as held once an agreement after it is a grace old", () => {
    const a = new TombAgreements(GRACE_MS);
    expect(a.heldUntil(3, "dc2", 10_000)).toBe(0);
    a.agreed(3, "dc2", 5_000);
    // An agreement younger than the grace says nothing yet: a copy read before it may be in flight.
    expect(a.heldUntil(3, "dc2", 5_999)).toBe(0);
    expect(a.heldUntil(3, "dc2", 6_000)).toBe(4_999);
    a.agreed(3, "dc2", 5_800);
    a.agreed(3, "dc2", 6_500);
    expect(a.heldUntil(3, "dc2", 6_900)).toBe(5_799);
    expect(a.heldUntil(3, "dc2", 7_500)).toBe(6_499);
    // Another DC, another partition: nothing learnt.
    expect(a.heldUntil(3, "dc3", 7_500)).toBe(0);
    expect(a.heldUntil(4, "dc2", 7_500)).toBe(0);
  });

  test("counter - agreements out of order or repeated change nothing, old ones are pruned, a dropped partition forgets", () => {
    const a = new TombAgreements(GRACE_MS);
    for (let t = 1_000; t <= 100_000; t += 100) a.agreed(1, "dc2", t);
    a.agreed(1, "dc2", 50_000);
    expect(a.heldUntil(1, "dc2", 100_000)).toBe(98_999);
    expect(a.heldUntil(1, "dc2", 200_000)).toBe(99_999);
    a.forget(1);
    expect(a.heldUntil(1, "dc2", 200_000)).toBe(0);
  });
});
