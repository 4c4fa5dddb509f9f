/**
 * Idempotency keys of a counter node's first changes after a restart (key_replication.ts), two DCs
 * in one process on a manual clock (test/support/dc_simulation.ts). A node that restarts on its
 * DC's store serves at once, before it hears the other DCs again; what it answers in that time
 * reaches them too, while it may still hear one (the discovery window since its start). A node
 * that heard no other DC by the end of that window, with none listed, sends none.
 */
import { afterEach, describe, expect, test } from "vitest";
import { DcSimulation, SIM_ENV } from "../../../test/support/dc_simulation.js";

const SENT = 'livecount_counter_idempotency_keys_across_dcs_total{outcome="sent"}';
const STORED = 'livecount_counter_idempotency_keys_across_dcs_total{outcome="stored"}';
/** Bootstrap's discovery window: 4 DC heartbeats (convergence.ts). */
const DISCOVERY_MS = 4 * Number(SIM_ENV.LIVECOUNT_DC_HEARTBEAT_MS);

let sim: DcSimulation | undefined;
/** When dc1's node was started again (clock time). */
let restartedAt = 0;
afterEach(async () => {
  await sim?.stop();
  sim = undefined;
});

/** dc1 and dc2 linked and heard by each other; then dc1's node restarts hearing nothing of dc2. */
async function restartedDeaf(): Promise<DcSimulation> {
  sim = new DcSimulation();
  const s = sim;
  s.add("dc1");
  s.add("dc2");
  s.link("dc1", "dc2");
  await s.startAll(["dc1", "dc2"]);
  await s.until(() => s.dc("dc1").node!.ready && s.dc("dc2").node!.ready, "both ready");
  // dc2 hears dc1, and dc1 hears nothing of dc2 from now on (a one-way cut).
  s.drop = (from, to) => from === "dc2" && to === "dc1";
  await s.dc("dc1").node!.stop();
  restartedAt = s.clock.now();
  await s.dc("dc1").start();
  return s;
}

describe("counter - idempotency keys at a node's start", () => {
  test("counter - a restarted node's first answers reach the other DC before it hears any: a retry there is a replay", async () => {
    const s = await restartedDeaf();
    const [dc1, dc2] = [s.dc("dc1"), s.dc("dc2")];
    expect(await dc1.dcUp("dc2"), "dc1 has not heard dc2 since its restart").toBe(false);

    expect(await dc1.increment("early", "likes", 1, "early-1")).toBe(1);
    expect(s.clock.now() - restartedAt, "answered within the discovery window").toBeLessThan(DISCOVERY_MS);
    await s.run(1000);
    expect(await dc1.metric(SENT), "keys dc1 sent").toBe(1);
    expect(await dc2.metric(STORED), "keys dc2 stored").toBe(1);

    // The publisher's retry lands in dc2: answered as the change it repeats, counted once.
    expect(await dc2.increment("early", "likes", 1, "early-1")).toBe(1);
    expect((await dc2.entries("early")).likes?.dc2, "no entry of dc2 for the retry").toBeUndefined();
  });

  test("counter - a node that heard no other DC by the end of its discovery window sends no keys", async () => {
    const s = await restartedDeaf();
    const dc1 = s.dc("dc1");
    await s.run(DISCOVERY_MS);
    expect(await dc1.dcUp("dc2")).toBe(false);

    expect(await dc1.increment("late", "likes", 1, "late-1")).toBe(1);
    await s.run(1000);
    expect(await dc1.metric(SENT), "keys dc1 sent").toBe(0);
  });
});
