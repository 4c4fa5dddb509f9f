/**
 * BusIsolation against the memory store, time moved by hand: a counter node ("counter-1") that
 * hears its bus or not, and another node's notes ("counter-2") written as the test says it hears.
 */
import { silentLogger } from "@livecount/runtime";
import { MemoryStore, StoreError, type Store } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { BusIsolation, MIN_PROOF_MS } from "../src/bus_isolation.js";

const NODE_LEASE_MS = 6000;
/** A sixth of the lease: how often notes go and checks run. */
const STEP_MS = 1000;
const START_MS = 1_000_000;

/** A store whose bus notes fail while `failing` (Redis unreachable). */
type NotesStore = Pick<Store, "noteBusHeard" | "busHeard"> & { failing: boolean };

/**
 * `storeAheadMs`: how far the store's clock is ahead of this node's (notes are on the store's
 * clock; the node times its own silence on its own).
 */
function harness(nodeLeaseMs = NODE_LEASE_MS, storeAheadMs = 0) {
  const clock = new ManualClock(START_MS);
  const memory = new MemoryStore({ now: () => clock.now() + storeAheadMs });
  const store: NotesStore = {
    failing: false,
    noteBusHeard: (node, continuing) =>
      store.failing ? Promise.reject(new StoreError("down")) : memory.noteBusHeard(node, continuing),
    busHeard: () => (store.failing ? Promise.reject(new StoreError("down")) : memory.busHeard()),
  };
  const health = { heardAt: START_MS, unansweredSince: undefined, delivered: () => {} };
  /** true: withdrawn from the ring (cut off), false: back on it. */
  const changes: boolean[] = [];
  let onChanges = 0;
  const isolation = new BusIsolation({
    store,
    clock,
    logger: silentLogger,
    node: "counter-1",
    health,
    nodeLeaseMs,
    membership: { withdraw: () => changes.push(true), rejoin: () => changes.push(false) },
    onChange: () => onChanges++,
  });
  const step = Math.floor(nodeLeaseMs / 6);
  let otherHears = false;
  /**
   * Moves time by `ms` in steps: this node hears its bus while `hears`, the other node while
   * `other` (it notes it at every step, as its own BusIsolation would, unless the store is failing).
   */
  const run = async (ms: number, hears: boolean, other = false): Promise<void> => {
    for (let t = 0; t < ms; t += step) {
      await clock.advance(step);
      if (hears) health.heardAt = clock.monotonic();
      if (other && !store.failing) await memory.noteBusHeard("counter-2", otherHears);
      otherHears = other;
      await isolation.tick();
    }
  };
  return { clock, memory, store, health, changes, isolation, run, onChanges: () => onChanges };
}

describe("bus isolation", () => {
  test("isolation - a node that hears its bus notes it at every step, on the store's clock, since when without a break", async () => {
    const { memory, run, changes } = harness(NODE_LEASE_MS, 5000);
    await run(3 * STEP_MS, true);
    const { notes } = await memory.busHeard();
    expect(notes).toEqual(
      new Map([["counter-1", { since: START_MS + 5000 + STEP_MS, at: START_MS + 5000 + 3 * STEP_MS }]]),
    );
    expect(changes).toEqual([]);
  });

  test("isolation - a stretch of hearing survives a step with nothing heard, and breaks after two: the next note starts anew", async () => {
    const { memory, run } = harness();
    await run(2 * STEP_MS, true);
    await run(STEP_MS, false);
    await run(STEP_MS, true);
    expect((await memory.busHeard()).notes.get("counter-1")).toEqual({
      since: START_MS + STEP_MS,
      at: START_MS + 4 * STEP_MS,
    });
    await run(2 * STEP_MS, false);
    await run(STEP_MS, true);
    expect((await memory.busHeard()).notes.get("counter-1")).toEqual({
      since: START_MS + 7 * STEP_MS,
      at: START_MS + 7 * STEP_MS,
    });
  });

  test("isolation - silent for a node lease while another node hears the bus as it did before: hands its partitions over once, and takes them back once it has heard its bus again for the proof's length", async () => {
    const { clock, run, changes, isolation } = harness();
    await run(2 * STEP_MS, true, true);
    const silentFrom = clock.now();
    await run(NODE_LEASE_MS - STEP_MS, false, true);
    expect(changes).toEqual([]);
    await run(STEP_MS, false, true);
    expect(clock.now() - silentFrom).toBe(NODE_LEASE_MS);
    expect(changes).toEqual([true]);
    expect(isolation.isolated).toBe(true);
    await run(3 * STEP_MS, false, true);
    expect(changes).toEqual([true]);
    // Heard again: not taken back before it has heard its bus for half a lease.
    await run(2 * STEP_MS, true, true);
    expect(changes).toEqual([true]);
    await run(2 * STEP_MS, true, true);
    expect(changes).toEqual([true, false]);
    expect(isolation.isolations).toBe(1);
  });

  test("isolation - a cut of a node whose lease is short still needs the late stretch's floor: 10 s of another's hearing begun after its last note", async () => {
    const lease = 1500;
    const step = lease / 6;
    const { run, changes } = harness(lease);
    await run(2 * step, true, true);
    await run(3 * lease, false, false);
    // Two leases are 3 s here: a node reconnecting a few waits late is not cut off.
    await run(9000, false, true);
    expect(changes).toEqual([]);
    await run(1000 + step, false, true);
    expect(changes).toEqual([true]);
  });

  test("isolation - NATS silent for every node: the other's hearing ended about when this one's did, and it keeps its partitions", async () => {
    const { run, changes } = harness();
    await run(2 * STEP_MS, true, true);
    // The other node heard the bus a step longer than this one, within the time between two notes.
    await run(STEP_MS, false, true);
    await run(3 * NODE_LEASE_MS, false, false);
    expect(changes).toEqual([]);
  });

  test("isolation - the nodes' clocks seconds apart: notes are judged on the store's, and an outage is still nobody's proof", async () => {
    for (const ahead of [-4500, 4500]) {
      const { run, changes } = harness(NODE_LEASE_MS, ahead);
      await run(2 * STEP_MS, true, true);
      await run(3 * NODE_LEASE_MS, false, false);
      expect(changes, `store clock ${ahead} ms ahead`).toEqual([]);
    }
  });

  test("isolation - coming back from an outage one after another is no proof: a stretch begun after this node's last note must last two leases", async () => {
    const { run, changes } = harness();
    await run(2 * STEP_MS, true, true);
    await run(3 * NODE_LEASE_MS, false, false);
    // NATS is back; the other node reconnected first, this one is still dialing: its notes span
    // just short of two leases.
    await run(2 * NODE_LEASE_MS, false, true);
    expect(changes).toEqual([]);
    // Still nothing here once the other's hearing spans two leases: this node is cut off after all.
    await run(STEP_MS, false, true);
    expect(changes).toEqual([true]);
  });

  test("isolation - a link that lets one answer through now and then: handed over once, not taken back and handed over again", async () => {
    const { run, changes, isolation } = harness();
    await run(2 * STEP_MS, true, true);
    for (let i = 0; i < 5; i++) {
      await run(STEP_MS, true, true);
      await run(7 * STEP_MS, false, true);
    }
    expect(changes).toEqual([true]);
    expect(isolation.isolations).toBe(1);
  });

  test("isolation - the proof lasts 2 s at least: with a 1.5 s node lease, silence alone does not prove before", async () => {
    const lease = 1500;
    const step = lease / 6;
    const { clock, run, changes } = harness(lease);
    await run(2 * step, true, true);
    const silentFrom = clock.now();
    while (changes.length === 0) await run(step, false, true);
    // The first step at which the other's hearing past this node's last note reached 2 s.
    expect(clock.now() - silentFrom).toBeGreaterThanOrEqual(MIN_PROOF_MS);
    expect(clock.now() - silentFrom).toBeLessThanOrEqual(MIN_PROOF_MS + step);
  });

  test("isolation - a stall of this process is no break in its stretch of hearing: the step that wakes late notes nothing, the next goes on", async () => {
    const { clock, memory, run, isolation } = harness();
    await run(2 * STEP_MS, true);
    // Frozen for three steps: nothing read from the bus meanwhile, as nothing ran.
    clock.jump(3 * STEP_MS);
    await isolation.tick();
    expect((await memory.busHeard()).notes.get("counter-1")).toEqual({
      since: START_MS + STEP_MS,
      at: START_MS + 2 * STEP_MS,
    });
    await run(STEP_MS, true);
    expect((await memory.busHeard()).notes.get("counter-1")).toEqual({
      since: START_MS + STEP_MS,
      at: START_MS + 6 * STEP_MS,
    });
  });

  test("isolation - a step that woke late from a stall looks for no proof: the process has not read its socket yet", async () => {
    const { clock, run, changes, isolation } = harness();
    await run(2 * STEP_MS, true, true);
    clock.jump(2 * NODE_LEASE_MS);
    await isolation.tick();
    expect(changes).toEqual([]);
    await run(STEP_MS, false, true);
    expect(changes).toEqual([true]);
  });

  test("isolation - a store that fails holds the decision, which is made once it answers again", async () => {
    const { store, run, changes, onChanges } = harness();
    await run(2 * STEP_MS, true, true);
    store.failing = true;
    // The other node keeps hearing its bus; only its notes fail.
    await run(2 * NODE_LEASE_MS, false, true);
    expect(changes).toEqual([]);
    store.failing = false;
    // Its next note goes on with the stretch it began before this node's last note: proof at once.
    await run(STEP_MS, false, true);
    expect(changes).toEqual([true]);
    expect(onChanges()).toBe(1);
  });
});
