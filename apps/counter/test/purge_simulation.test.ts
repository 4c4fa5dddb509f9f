/**
 * Purging tombstones across data centers on a simulated clock (real counter nodes, in-memory buses
 * and stores): the cases that take time or a rebuilt DC, where a purge must not bring a deleted
 * counter back nor lose a like.
 */
import type { PurgedReply } from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import { DcSimulation } from "../../../test/support/dc_simulation.js";
import { withoutBuckets } from "../../../test/support/records.js";

const DCS = ["dc1", "dc2", "dc3"] as const;
/** Anti-entropy every second, so DCs compare tombstone digests often; the purge grace is 2 s + the lease. */
const ENV = { LIVECOUNT_ANTI_ENTROPY_MS: "1000" };
const PAGE = "sim/purged";

describe("counter - purging tombstones across data centers (simulated clock)", () => {
  let sim: DcSimulation;
  afterEach(async () => sim.stop());

  async function start(): Promise<void> {
    sim = new DcSimulation();
    for (const dc of DCS) sim.add(dc, { ...ENV, LIVECOUNT_PEER_DCS: DCS.filter((d) => d !== dc).join(",") });
    for (const [i, a] of DCS.entries()) for (const b of DCS.slice(i + 1)) sim.link(a, b);
    await sim.startAll(DCS);
  }

  async function purge(dc: string): Promise<PurgedReply> {
    const reply = await sim.dc(dc).ask({ type: "purge", olderThanMs: 0 });
    if (reply.type !== "purged") throw new Error(`${dc}: purge failed: ${JSON.stringify(reply)}`);
    return reply;
  }

  /** The page's counters (presence left out) with every DC's entry, as the DC's owner holds them. */
  async function held(dc: string): Promise<Record<string, unknown>> {
    const { "@viewers": _, ...rest } = await sim.dc(dc).entries(PAGE);
    return withoutBuckets(rest);
  }

  async function remove(dc: string, key: string): Promise<void> {
    const reply = await sim.dc(dc).ask({ type: "reset", page: PAGE, counter: "likes", key, tombstone: true });
    if (reply.type !== "counter_reset") throw new Error(`${dc}: delete failed: ${JSON.stringify(reply)}`);
  }

  test("counter - a DC rebuilt after a purge, while a DC holding the old copy is away, counts its next like once that DC is back", async () => {
    await start();
    // Written and deleted in dc2 only: a settled delete every DC learns.
    await sim.dc("dc2").increment(PAGE, "likes", 3, "like-1");
    await remove("dc2", "delete-1");
    await sim.run(10_000);
    expect(Object.keys(await held("dc3")).sort()).toEqual(["@del:likes", "likes"]);
    // dc3 goes away holding it; dc1 and dc2 purge (dc3 was known to hold it for the grace).
    sim.cut("dc1", "dc3");
    sim.cut("dc2", "dc3");
    expect(await purge("dc1")).toMatchObject({ counters: 1 });
    await sim.run(2_000);
    expect(await held("dc2")).toEqual({});
    // dc2 loses its store and learns the partition again from dc1 alone, then takes a like.
    await sim.dc("dc2").rebuild();
    await sim.dc("dc2").increment(PAGE, "likes", 1, "like-2");
    // It starts above dc2's purged entry: the purge floor came with the partition from dc1.
    expect((await held("dc2")).likes).toEqual({ dc2: { p: 4, n: 3 } });
    // dc3 comes back with its copy of dc2's old entry {3, 3} and the tombstone: the like stays.
    sim.link("dc1", "dc3");
    sim.link("dc2", "dc3");
    await sim.run(10_000);
    for (const dc of DCS) expect(await sim.dc(dc).value(PAGE, "likes"), dc).toBe(1);
  });

  test("counter - a tombstone goes only once every DC has held it for the purge grace (2 anti-entropy periods + the DC lease: 7 s here)", async () => {
    await start();
    await sim.dc("dc1").increment(PAGE, "likes", 2, "like-1");
    await remove("dc1", "delete-1");
    // Within a second every DC holds it and anti-entropy finds their tombstone digests equal; 5 s on,
    // that agreement is younger than the grace.
    await sim.run(5_000);
    expect(await purge("dc1")).toMatchObject({ counters: 0, waiting: 1 });
    expect(Object.keys(await held("dc1")).sort()).toEqual(["@del:likes", "likes"]);
    // Past the grace, the node's next look purges it without being asked again.
    await sim.run(5_000);
    expect(await held("dc1")).toEqual({});
  });

  test("counter - a DC that missed the delete holds the purge back until it has the tombstone, and never brings the counter back", async () => {
    await start();
    await sim.dc("dc1").increment(PAGE, "likes", 5, "like-1");
    await sim.run(5_000);
    sim.cut("dc1", "dc3");
    sim.cut("dc2", "dc3");
    await remove("dc1", "delete-1");
    await sim.run(20_000);
    const first = await purge("dc1");
    expect(first).toMatchObject({ counters: 0 });
    expect(first.waiting).toBeGreaterThan(0);
    expect(Object.keys(await held("dc1")).sort()).toEqual(["@del:likes", "likes"]);
    // Back: dc3 learns the delete, the purge goes on by itself, and nowhere does the counter show.
    sim.link("dc1", "dc3");
    sim.link("dc2", "dc3");
    await sim.run(20_000);
    expect(await held("dc1")).toEqual({});
    for (const dc of DCS) {
      const entries = await held(dc);
      const shown = entries.likes !== undefined && entries["@del:likes"] === undefined;
      expect(shown, `${dc} shows the deleted counter`).toBe(false);
    }
  });
});
