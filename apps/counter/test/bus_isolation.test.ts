import { silentLogger } from "@livecount/runtime";
import { MemoryStore } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { BusIsolation } from "../src/bus_isolation.js";

const NODE_LEASE_MS = 6000;
/** A sixth of the lease: how often notes go and checks run. */
const STEP_MS = 1000;
const START_MS = 1_000_000;

/** A counter node's view of its bus, moved by hand: `heardAt` is when it last heard it. */
function harness() {
  const clock = new ManualClock(START_MS);
  const store = new MemoryStore({ now: () => clock.now() });
  const health = { heardAt: START_MS, unansweredSince: undefined, delivered: () => {} };
  const changes: boolean[] = [];
  const isolation = new BusIsolation({
    store,
    clock,
    logger: silentLogger,
    node: "counter-1",
    health,
    nodeLeaseMs: NODE_LEASE_MS,
    onChange: (cut) => changes.push(cut),
  });
  /** Moves time by `ms` in steps; the bus carries for this node while `hears`. */
  const run = async (ms: number, hears: boolean): Promise<void> => {
    for (let t = 0; t < ms; t += STEP_MS) {
      await clock.advance(STEP_MS);
      if (hears) health.heardAt = clock.now();
      await isolation.tick();
    }
  };
  return { clock, store, health, changes, isolation, run };
}

describe("bus isolation", () => {
  test("isolation - a node that hears its bus notes since when and until when, a note per step at most", async () => {
    const { store, run, changes } = harness();
    await run(3 * STEP_MS, true);
    expect(await store.busHeard()).toEqual(
      new Map([["counter-1", { since: START_MS + STEP_MS, at: START_MS + 3 * STEP_MS }]]),
    );
    expect(changes).toEqual([]);
  });

  test("isolation - a stretch of hearing survives a step with nothing heard, and breaks after more: the next note starts anew", async () => {
    const { store, run } = harness();
    await run(2 * STEP_MS, true);
    await run(STEP_MS, false);
    await run(STEP_MS, true);
    expect(await store.busHeard()).toEqual(
      new Map([["counter-1", { since: START_MS + STEP_MS, at: START_MS + 4 * STEP_MS }]]),
    );
    await run(3 * STEP_MS, false);
    await run(STEP_MS, true);
    expect(await store.busHeard()).toEqual(
      new Map([["counter-1", { since: START_MS + 8 * STEP_MS, at: START_MS + 8 * STEP_MS }]]),
    );
  });

  test("isolation - silent for a node lease while another node keeps hearing the bus: hands its partitions over once, and takes them back when its bus carries", async () => {
    const { store, clock, run, changes, isolation } = harness();
    await run(STEP_MS, true);
    const silentFrom = clock.now();
    // Just short of a lease: the other's notes say nothing yet.
    for (let t = 0; t < NODE_LEASE_MS - STEP_MS; t += STEP_MS) {
      await store.noteBusHeard("counter-2", { since: START_MS, at: clock.now() });
      await run(STEP_MS, false);
    }
    expect(changes).toEqual([]);
    await store.noteBusHeard("counter-2", { since: START_MS, at: clock.now() });
    await run(STEP_MS, false);
    expect(clock.now() - silentFrom).toBe(NODE_LEASE_MS);
    expect(changes).toEqual([true]);
    expect(isolation.isolated).toBe(true);
    // Still cut off: nothing more.
    await store.noteBusHeard("counter-2", { since: START_MS, at: clock.now() });
    await run(3 * STEP_MS, false);
    expect(changes).toEqual([true]);
    expect(isolation.isolations).toBe(1);
    await run(STEP_MS, true);
    expect(changes).toEqual([true, false]);
    expect(isolation.isolated).toBe(false);
  });

  test("isolation - NATS silent for every node: the other's hearing ended about when this one's did, and it keeps its partitions", async () => {
    const { store, clock, run, changes } = harness();
    await run(STEP_MS, true);
    // The other node heard the bus a step longer than this one, within the time between two notes.
    await store.noteBusHeard("counter-2", { since: START_MS, at: clock.now() + STEP_MS });
    await run(3 * NODE_LEASE_MS, false);
    expect(changes).toEqual([]);
  });

  test("isolation - coming back from an outage one after another is no proof: the first back has not heard the bus for long", async () => {
    const { store, clock, run, changes } = harness();
    await run(STEP_MS, true);
    await run(3 * NODE_LEASE_MS, false);
    // NATS is back; the other node reconnected first and has heard it for a second and a half.
    await store.noteBusHeard("counter-2", { since: clock.now() - 1500, at: clock.now() });
    await run(STEP_MS, false);
    expect(changes).toEqual([]);
    // Still nothing here while the other has heard the bus without a break for the proof's length
    // (half a lease): this node is cut off after all.
    await store.noteBusHeard("counter-2", { since: clock.now() - 2500, at: clock.now() + 500 });
    await run(STEP_MS, false);
    expect(changes).toEqual([true]);
  });

  test("isolation - an old note proves nothing: the other node heard the bus after this one stopped, then nothing for a lease (NATS went down for it too)", async () => {
    const { store, clock, run, changes, isolation } = harness();
    await run(STEP_MS, true);
    const heardAt = clock.now();
    await store.noteBusHeard("counter-2", { since: START_MS, at: heardAt + NODE_LEASE_MS / 2 });
    // This node looks only now (it stalled): the other's last hearing is more than a lease old.
    clock.jump(2 * NODE_LEASE_MS);
    await isolation.tick();
    expect(changes).toEqual([]);
    // A note from within the last lease, after this node stopped hearing, is proof.
    await store.noteBusHeard("counter-2", { since: START_MS, at: clock.now() - NODE_LEASE_MS / 2 });
    await run(STEP_MS, false);
    expect(changes).toEqual([true]);
  });

  test("isolation - its own notes never prove its isolation", async () => {
    const { store, clock, run, changes } = harness();
    await run(STEP_MS, true);
    await run(NODE_LEASE_MS, false);
    await store.noteBusHeard("counter-1", { since: START_MS, at: clock.now() });
    await run(2 * STEP_MS, false);
    expect(changes).toEqual([]);
  });

  test("isolation - a store that fails is tried again at the next step, and nothing throws", async () => {
    const { store, clock, run, changes } = harness();
    await run(STEP_MS, true);
    await run(NODE_LEASE_MS, false);
    await store.noteBusHeard("counter-2", { since: START_MS, at: clock.now() });
    await store.close();
    await run(2 * STEP_MS, false);
    expect(changes).toEqual([]);
  });
});
