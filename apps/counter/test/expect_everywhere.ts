/**
 * What the convergence simulations (convergence_simulation*.test.ts) expect of every DC at the end:
 * the same likes on every page, read from each DC's owner.
 */
import { expect } from "vitest";
import type { DcSimulation } from "../../../test/support/dc_simulation.js";

/** Expects every DC to hold exactly `truth` (page -> likes), asking each DC's owner. */
export async function expectEverywhere(
  sim: DcSimulation,
  dcs: readonly string[],
  truth: ReadonlyMap<string, number>,
): Promise<void> {
  for (const dc of dcs) {
    const seen = new Map<string, number>();
    for (const page of truth.keys()) seen.set(page, await sim.dc(dc).value(page, "likes"));
    expect(seen, `likes in ${dc}`).toEqual(truth);
  }
}
