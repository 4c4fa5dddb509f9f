import { describe, expect, test } from "vitest";
import { TransferGaps } from "../src/transfer_gaps.js";

const lease = (epoch: number) => ({ partition: 3, node: "n1/a", epoch });

describe("counter - transfer gaps", () => {
  test("counter - a transfer merged whole under one lease ends without a gap, and the next one starts afresh", () => {
    const gaps = new TransferGaps();
    expect(gaps.mayMerge("dc2", 3, lease(4))).toBe(true);
    expect(gaps.mayMerge("dc2", 3, lease(4))).toBe(true);
    expect(gaps.end("dc2", 3)).toBe(false);
    // A later transfer under a later tenure's lease: nothing carried over.
    expect(gaps.mayMerge("dc2", 3, lease(5))).toBe(true);
    expect(gaps.end("dc2", 3)).toBe(false);
  });

  test("counter - entries with no lease held, or under another tenure's lease than the first, leave a gap", () => {
    const gaps = new TransferGaps();
    expect(gaps.mayMerge("dc2", 3, undefined)).toBe(false);
    expect(gaps.end("dc2", 3)).toBe(true);
    expect(gaps.mayMerge("dc2", 3, lease(4))).toBe(true);
    expect(gaps.mayMerge("dc2", 3, lease(5))).toBe(false);
    expect(gaps.end("dc2", 3)).toBe(true);
  });

  test("counter - a merge the store refused is a gap of that transfer only; a dropped partition forgets its transfers", () => {
    const gaps = new TransferGaps();
    gaps.mayMerge("dc2", 3, lease(4));
    gaps.mayMerge("dc3", 3, lease(4));
    gaps.gap("dc2", 3);
    expect(gaps.end("dc3", 3)).toBe(false);
    expect(gaps.end("dc2", 3)).toBe(true);
    gaps.mayMerge("dc2", 3, undefined);
    gaps.dropPartition(3);
    expect(gaps.end("dc2", 3)).toBe(false);
  });
});
