/**
 * Data centers that start without their own entries, simulated in one process on one clock
 * (test/support/dc_simulation.ts): a DC rebuilt with an empty store waits for the DC that holds its
 * entries before it serves, and DCs new together start once every DC they list is heard.
 */
import { decodeMessage } from "@livecount/protocol";
import { MemoryStore, StoreError } from "@livecount/store";
import { afterEach, describe, expect, test } from "vitest";
import { DcSimulation, SIM_ENV } from "../../../test/support/dc_simulation.js";
import type { ManualClock } from "../../../test/support/manual_clock.js";
import { expectEverywhere } from "./expect_everywhere.js";

const HOUR_MS = 3_600_000;

/** A store that cannot mark a partition bootstrapped while `marks` is false (a failing Redis write). */
class UnmarkableStore extends MemoryStore {
  marks = false;

  constructor(clock: ManualClock) {
    super({ now: () => clock.now() });
  }

  override async markBootstrapped(...args: Parameters<MemoryStore["markBootstrapped"]>): Promise<boolean> {
    if (!this.marks) throw new StoreError("redis markBootstrapped failed: Command timed out");
    return super.markBootstrapped(...args);
  }
}

describe("counter - convergence across data centers (simulated clock)", () => {
  let sim: DcSimulation;
  afterEach(async () => sim.stop());

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
    await expectEverywhere(sim, ["dc1", "dc2"], truth);
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

  test("counter - a DC rebuilt while a new DC joins waits for the DC that holds its entries, not the new one", async () => {
    sim = new DcSimulation();
    // dc1 and dc2 start new together: dc1, first by name, starts every partition; dc2 learns them.
    sim.add("dc1", { LIVECOUNT_PEER_DCS: "dc2" });
    sim.add("dc2", { LIVECOUNT_PEER_DCS: "dc1,dc3" });
    sim.add("dc3", { LIVECOUNT_PEER_DCS: "dc1,dc2" });
    sim.link("dc1", "dc2");
    await sim.startAll(["dc1", "dc2"]);
    for (let i = 0; i < 20; i++) await sim.dc("dc2").increment(`p${i}`, "likes", 10, `k${i}`);
    await sim.run(2_000);
    // dc3, new, learns dc1's pages but cannot mark a partition learnt: it holds them, still learning.
    const dc3Store = new UnmarkableStore(sim.clock);
    sim.dc("dc3").store = dc3Store;
    sim.link("dc1", "dc3");
    await sim.dc("dc3").launch();
    await sim.run(5_000);
    expect(sim.dc("dc3").node!.ready).toBe(false);
    // dc2 loses its store while cut off from dc1, and reaches only dc3. Both are learning every
    // partition: each merges what the other holds, but neither may serve on it.
    sim.cut("dc1", "dc2");
    sim.cut("dc1", "dc3");
    await sim.dc("dc2").node!.stop();
    sim.dc("dc2").store = new MemoryStore({ now: () => sim.clock.now() });
    sim.link("dc2", "dc3");
    // dc3's bucket digests never reach dc2: dc2 hears of dc3 through the transfers dc3 drives alone.
    sim.drop = (from, to, subject, data) =>
      from === "dc3" && subject.startsWith("lc.ae.") && decodeMessage(data).type === "ae_buckets";
    await sim.dc("dc2").launch();
    await sim.run(30_000);
    // No partition of either serves: every read is refused, none answered from a partial store.
    for (const dc of ["dc2", "dc3"]) {
      for (let i = 0; i < 20; i++) {
        const reply = await sim.dc(dc).ask({ type: "snapshot", page: `p${i}` });
        expect(reply, `${dc} reads p${i}`).toMatchObject({ type: "error", code: "unavailable" });
      }
    }
    sim.drop = undefined;
    dc3Store.marks = true;
    sim.link("dc1", "dc2");
    sim.link("dc1", "dc3");
    await sim.until(() => sim.dc("dc2").node!.ready && sim.dc("dc3").node!.ready, "dc2 and dc3 bootstrapped");
    // Its own entries are back: the next like counts on top of them.
    expect(await sim.dc("dc2").increment("p7", "likes", 1, "after-rebuild")).toBe(11);
    await sim.run(2_000);
    const truth = new Map(Array.from({ length: 20 }, (_, i) => [`p${i}`, i === 7 ? 11 : 10]));
    await expectEverywhere(sim, ["dc1", "dc2", "dc3"], truth);
  });

  test("counter - DCs all new together start once every listed DC is heard, and not before", async () => {
    sim = new DcSimulation();
    for (const dc of ["dc1", "dc2", "dc3"])
      sim.add(dc, { LIVECOUNT_PEER_DCS: "dc1,dc2,dc3".replace(`${dc},`, "").replace(`,${dc}`, "") });
    sim.link("dc2", "dc3");
    await sim.dc("dc2").launch();
    await sim.dc("dc3").launch();
    // dc1, listed by both, may hold every partition: nobody starts without hearing it.
    await sim.run(20_000);
    expect(sim.dc("dc2").node!.ready).toBe(false);
    expect(sim.dc("dc3").node!.ready).toBe(false);
    sim.link("dc1", "dc2");
    sim.link("dc1", "dc3");
    const linkedAt = sim.clock.now();
    await sim.dc("dc1").launch();
    await sim.until(() => ["dc1", "dc2", "dc3"].every((dc) => sim.dc(dc).node!.ready), "every DC ready");
    // dc1 starts each partition once it hears the others are learning it too; they learn it from dc1
    // when they ask again, a second later.
    expect(sim.clock.now() - linkedAt).toBeLessThan(5_000);
    await sim.dc("dc3").increment("q", "likes", 2, "k");
    await sim.run(2_000);
    await expectEverywhere(sim, ["dc1", "dc2", "dc3"], new Map([["q", 2]]));
  });

  /**
   * No peers listed: dc1 and dc3 run, dc1's 20 pages with 10 likes each held by both; then dc1's node
   * stops and its store is lost (started again by the test), and dc2, new and not started, is linked
   * to dc1 only.
   */
  async function rebuiltBesideNewDc(): Promise<void> {
    sim = new DcSimulation();
    for (const dc of ["dc1", "dc2", "dc3"]) sim.add(dc);
    sim.link("dc1", "dc3");
    await sim.startAll(["dc1", "dc3"]);
    for (let i = 0; i < 20; i++) await sim.dc("dc1").increment(`p${i}`, "likes", 10, `k${i}`);
    await sim.run(2_000);
    await sim.dc("dc1").node!.stop();
    sim.dc("dc1").store = new MemoryStore({ now: () => sim.clock.now() });
    sim.link("dc1", "dc2");
  }

  test("counter - with no peers listed, a DC that holds the partition heard mid-round is waited for before learners start it", async () => {
    await rebuiltBesideNewDc();
    // Cut off from dc3, which holds its entries, dc1 hears dc2 alone.
    sim.cut("dc1", "dc3");
    await sim.dc("dc1").launch();
    await sim.dc("dc2").launch();
    // dc3 is heard a second later, within discovery, its anti-entropy 1.5 s late on the way to dc1:
    // dc1's first round (dc2 alone, learning) ends before dc3 answers.
    sim.delay = (from, to, subject) =>
      from === "dc3" && to === "dc1" && subject.startsWith("lc.ae.") ? 1_500 : 0;
    await sim.clock.advance(1_000);
    sim.link("dc1", "dc3");
    await sim.until(() => sim.dc("dc1").node!.ready, "dc1 ready");
    expect(await sim.dc("dc1").increment("p7", "likes", 1, "after-rebuild")).toBe(11);
    await sim.run(5_000);
    await expectEverywhere(
      sim,
      ["dc1", "dc2", "dc3"],
      new Map([
        ["p7", 11],
        ["p8", 10],
      ]),
    );
  });

  test("counter - with no peers listed, a rebuilt DC that heard the DC holding its entries waits for it while it is away", async () => {
    await rebuiltBesideNewDc();
    // dc3's answers to the rebuilt dc1 are lost, then the link breaks: dc2 is all dc1 hears.
    sim.drop = (from, to, subject) => from === "dc3" && to === "dc1" && subject.startsWith("lc.ae.");
    await sim.dc("dc1").launch();
    await sim.dc("dc2").launch();
    await sim.run(3_000);
    expect(await sim.dc("dc1").dcUp("dc3")).toBe(true);
    sim.cut("dc1", "dc3");
    sim.drop = undefined;
    await sim.run(20_000);
    expect(await sim.dc("dc1").dcUp("dc3")).toBe(false);
    expect(sim.dc("dc1").node!.ready).toBe(false);
    sim.link("dc1", "dc3");
    await sim.until(() => sim.dc("dc1").node!.ready && sim.dc("dc2").node!.ready, "dc1 and dc2 ready");
    expect(await sim.dc("dc1").increment("p7", "likes", 1, "after-rebuild")).toBe(11);
  });

  test("counter - DCs all new together that each list the whole deployment, themselves included, start", async () => {
    sim = new DcSimulation();
    const dcs = ["dc1", "dc2", "dc3"];
    for (const dc of dcs) sim.add(dc, { LIVECOUNT_PEER_DCS: dcs.join(",") });
    sim.link("dc1", "dc2");
    sim.link("dc1", "dc3");
    sim.link("dc2", "dc3");
    await sim.startAll(dcs);
    // Nor does a DC report itself as a peer that is down.
    const { values } = await sim.dc("dc1").registry.getSingleMetric("livecount_counter_dc_up")!.get();
    expect(values.map((v) => v.labels.dc).sort()).toEqual(["dc2", "dc3"]);
  });

  test("counter - two listed DCs new together are not held back by an unlisted new DC whose name sorts first", async () => {
    sim = new DcSimulation();
    sim.add("dc1", { LIVECOUNT_PEER_DCS: "dc2,dc3" });
    sim.add("dc2", { LIVECOUNT_PEER_DCS: "dc3" });
    sim.add("dc3", { LIVECOUNT_PEER_DCS: "dc2" });
    sim.link("dc2", "dc3");
    // dc1 cannot reach dc3, so it never starts anything; dc2 hears it, learning too, before dc3 comes,
    // and does not wait for it.
    sim.link("dc1", "dc2");
    await sim.dc("dc1").launch();
    await sim.dc("dc2").launch();
    await sim.run(3_000);
    await sim.dc("dc3").launch();
    await sim.until(() => sim.dc("dc2").node!.ready && sim.dc("dc3").node!.ready, "dc2 and dc3 ready");
    // dc1 learns every partition from dc2 once dc2 holds them.
    await sim.until(() => sim.dc("dc1").node!.ready, "dc1 ready");
  });

  test("counter - DCs learning together while a listed DC is away ask each other less and less often", async () => {
    sim = new DcSimulation();
    sim.add("dc1", { LIVECOUNT_PEER_DCS: "dc2,dc3" });
    sim.add("dc2", { LIVECOUNT_PEER_DCS: "dc1,dc3" });
    sim.link("dc1", "dc2");
    await sim.dc("dc1").launch();
    await sim.dc("dc2").launch();
    await sim.run(30_000);
    const answers = 'livecount_counter_anti_entropy_steps_total{step="buckets"}';
    const before = await sim.dc("dc1").metric(answers);
    await sim.run(60_000);
    expect(sim.dc("dc1").node!.ready).toBe(false);
    // dc2's every partition asked once per 10 s at most (it asked every second before).
    const partitions = Number(SIM_ENV.LIVECOUNT_PARTITIONS);
    expect((await sim.dc("dc1").metric(answers)) - before).toBeLessThanOrEqual(partitions * 7);
  });

  test("counter - two DCs new together with no peers listed start when discovery ends: the first by name, then the other from it", async () => {
    sim = new DcSimulation();
    sim.add("dc1");
    sim.add("dc2");
    sim.link("dc1", "dc2");
    const startedAt = sim.clock.now();
    await sim.startAll(["dc2", "dc1"]);
    const discoveryMs = 4 * Number(SIM_ENV.LIVECOUNT_DC_HEARTBEAT_MS);
    expect(sim.clock.now() - startedAt).toBeGreaterThanOrEqual(discoveryMs);
    expect(sim.clock.now() - startedAt).toBeLessThan(discoveryMs + 3_000);
    await sim.dc("dc2").increment("q", "likes", 3, "k");
    await sim.run(2_000);
    await expectEverywhere(sim, ["dc1", "dc2"], new Map([["q", 3]]));
  });
});
