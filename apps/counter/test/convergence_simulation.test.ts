/**
 * Convergence across data centers from durable state alone, simulated in one process on one clock
 * (test/support/dc_simulation.ts): real counter nodes and stores, hours of clock time in seconds.
 */
import { MemoryStore } from "@livecount/store";
import { afterEach, describe, expect, test } from "vitest";
import { DcSimulation } from "../../../test/support/dc_simulation.js";
import { mulberry32, testSeed } from "../../../test/support/prng.js";

const HOUR_MS = 3_600_000;

describe("counter - convergence across data centers (simulated clock)", () => {
  let sim: DcSimulation;
  afterEach(async () => sim.stop());

  /** Expects every DC to hold exactly `truth` (page -> likes), asking each DC's owner. */
  async function expectEverywhere(dcs: readonly string[], truth: ReadonlyMap<string, number>): Promise<void> {
    for (const dc of dcs) {
      const seen = new Map<string, number>();
      for (const page of truth.keys()) seen.set(page, await sim.dc(dc).value(page, "likes"));
      expect(seen, `likes in ${dc}`).toEqual(truth);
    }
  }

  test("counter - a two-hour partition heals exactly, untouched pages included, with no new traffic", async () => {
    const seed = testSeed("two-hour partition");
    const rnd = mulberry32(seed);
    sim = new DcSimulation();
    sim.add("dc1");
    sim.add("dc2");
    sim.link("dc1", "dc2");
    await sim.startAll(["dc1", "dc2"]);
    const truth = new Map<string, number>();
    const like = async (dc: string, page: string, key: string): Promise<void> => {
      const by = 1 + rnd.int(5);
      await sim.dc(dc).increment(page, "likes", by, key);
      truth.set(page, (truth.get(page) ?? 0) + by);
    };
    for (let i = 0; i < 40; i++) await like(i % 2 === 0 ? "dc1" : "dc2", `page-${i}`, `before-${i}`);
    await sim.run(2_000);
    sim.cut("dc1", "dc2");
    // Two hours apart, likes keep coming on both sides, on old pages and new ones; most pages are
    // never touched again after the heal.
    for (let minute = 0; minute < 120; minute++) {
      await sim.run(60_000);
      await like(rnd.chance(0.5) ? "dc1" : "dc2", `page-${rnd.int(60)}`, `cut-${minute}`);
    }
    // Apart, each DC shows only its own side of what happened.
    const disagree = [];
    for (const page of truth.keys()) {
      const [a, b] = [await sim.dc("dc1").value(page, "likes"), await sim.dc("dc2").value(page, "likes")];
      if (a !== b) disagree.push(page);
    }
    expect(disagree.length, `seed ${seed}: pages the DCs disagree on while apart`).toBeGreaterThan(10);
    sim.link("dc1", "dc2");
    await sim.run(10_000);
    await expectEverywhere(["dc1", "dc2"], truth);
  }, 60_000);

  test("counter - a DC rebuilt with an empty store gets its own entries back before it counts new ones", async () => {
    sim = new DcSimulation();
    sim.add("dc1", { LIVECOUNT_PEER_DCS: "dc2" });
    sim.add("dc2", { LIVECOUNT_PEER_DCS: "dc1" });
    sim.link("dc1", "dc2");
    await sim.startAll(["dc1", "dc2"]);
    for (let i = 0; i < 20; i++) await sim.dc("dc1").increment(`p${i}`, "likes", 10, `k${i}`);
    await sim.run(2_000);
    expect(await sim.dc("dc2").value("p7", "likes")).toBe(10);

    await sim.dc("dc1").rebuild();
    // Ready means bootstrapped: its own entry is back, and the next like counts on top of it.
    expect(await sim.dc("dc1").increment("p7", "likes", 1, "after-rebuild")).toBe(11);
    await sim.run(2_000);
    const truth = new Map(Array.from({ length: 20 }, (_, i) => [`p${i}`, i === 7 ? 11 : 10]));
    await expectEverywhere(["dc1", "dc2"], truth);
    expect((await sim.dc("dc1").entries("p3")).likes).toEqual({ dc1: { p: 10, n: 0 } });
  });

  test("counter - a rebuilt DC whose only peer is unreachable does not serve until the peer is back", async () => {
    sim = new DcSimulation();
    sim.add("dc1", { LIVECOUNT_PEER_DCS: "dc2" });
    sim.add("dc2", { LIVECOUNT_PEER_DCS: "dc1" });
    sim.link("dc1", "dc2");
    await sim.startAll(["dc1", "dc2"]);
    await sim.dc("dc1").increment("p", "likes", 5, "k");
    await sim.run(2_000);
    sim.cut("dc1", "dc2");
    await sim.dc("dc1").node!.stop();
    sim.dc("dc1").store = new MemoryStore({ now: () => sim.clock.now() });
    await sim.dc("dc1").launch();
    await sim.run(HOUR_MS / 6);
    expect(sim.dc("dc1").node!.ready).toBe(false);
    const refused = await sim
      .dc("dc1")
      .ask({ type: "increment", page: "p", counter: "likes", delta: 1, key: "x" });
    expect(refused).toMatchObject({ type: "error", code: "unavailable" });
    sim.link("dc1", "dc2");
    await sim.until(() => sim.dc("dc1").node!.ready, "dc1 bootstrapped");
    expect(await sim.dc("dc1").increment("p", "likes", 1, "y")).toBe(6);
  });

  test("counter - a DC that joins late learns every page, and a DC cut off from one peer converges through another", async () => {
    sim = new DcSimulation();
    for (const dc of ["a", "b", "c"]) sim.add(dc);
    sim.link("a", "b");
    await sim.startAll(["a", "b"]);
    const truth = new Map<string, number>();
    for (let i = 0; i < 30; i++) {
      await sim.dc(i % 2 === 0 ? "a" : "b").increment(`q${i}`, "likes", i + 1, `k${i}`);
      truth.set(`q${i}`, i + 1);
    }
    await sim.run(2_000);
    // c reaches b only; it joins late with an empty store and learns a's pages through b.
    sim.link("b", "c");
    await sim.dc("c").start();
    await sim.run(5_000);
    await expectEverywhere(["a", "b", "c"], truth);
    // A change in a travels to c through b's anti-entropy.
    await sim.dc("a").increment("q3", "likes", 100, "late");
    truth.set("q3", 104);
    await sim.run(2_000);
    expect(await sim.dc("c").value("q3", "likes")).toBe(4);
    // b got it in real time; c gets it when b and c next compare (periodically, or after a gap).
    sim.cut("b", "c");
    await sim.run(10_000);
    sim.link("b", "c");
    await sim.run(5_000);
    await expectEverywhere(["a", "b", "c"], truth);
  });
});
