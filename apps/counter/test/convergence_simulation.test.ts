/**
 * Convergence across data centers from durable state alone, simulated in one process on one clock
 * (test/support/dc_simulation.ts): real counter nodes and stores, hours of clock time in seconds.
 * Here, DCs that heal: after a partition, after anti-entropy messages crossed or were lost, a DC
 * joining late, and pages that left the store. A new DC learning from its peer is in
 * convergence_simulation_new_dc.test.ts; rebuilt DCs and DCs new together in
 * convergence_simulation_rebuilt.test.ts.
 */
import { DCS_SUBJECT, antiEntropySubject } from "@livecount/bus";
import { VIEWERS_COUNTER, decodeMessage, encodeMessage } from "@livecount/protocol";
import { MemoryStore, StoreError } from "@livecount/store";
import { afterEach, describe, expect, test } from "vitest";
import { DcSimulation } from "../../../test/support/dc_simulation.js";
import type { ManualClock } from "../../../test/support/manual_clock.js";
import { mulberry32, testSeed } from "../../../test/support/prng.js";
import { expectEverywhere } from "./expect_everywhere.js";

/** A store whose anti-entropy merges apply, then fail, when told: an answer lost to a timeout. */
class AnswerLosingStore extends MemoryStore {
  loseMergeAnswers = false;
  lostMergeAnswers = 0;

  override async mergePages(
    ...args: Parameters<MemoryStore["mergePages"]>
  ): ReturnType<MemoryStore["mergePages"]> {
    const advanced = await super.mergePages(...args);
    if (!this.loseMergeAnswers) return advanced;
    this.lostMergeAnswers++;
    throw new StoreError("redis mergePages failed: Command timed out");
  }
}

/** A store whose bucket digests take `delayMs` of clock time to read, when told: a busy Redis. */
class SlowBucketsStore extends MemoryStore {
  delayMs = 0;

  constructor(private readonly clock: ManualClock) {
    super({ now: () => clock.now() });
  }

  override async bucketDigests(partition: number): Promise<string[]> {
    if (this.delayMs > 0) await new Promise<void>((resolve) => this.clock.setTimeout(resolve, this.delayMs));
    return super.bucketDigests(partition);
  }
}

describe("counter - convergence across data centers (simulated clock)", () => {
  let sim: DcSimulation;
  afterEach(async () => sim.stop());

  test("counter - comparisons that cross while one side reads its bucket digests move each page once", async () => {
    sim = new DcSimulation();
    sim.add("dc1");
    const slow = new SlowBucketsStore(sim.clock);
    sim.add("dc2").store = slow;
    sim.link("dc1", "dc2");
    await sim.startAll(["dc1", "dc2"]);
    await sim.run(2_000);
    sim.cut("dc1", "dc2");
    const pages = Array.from({ length: 30 }, (_, i) => `crossed-${i}`);
    for (const page of pages) {
      await sim.dc("dc1").increment(page, "likes", 1, `a-${page}`);
      await sim.dc("dc2").increment(page, "likes", 2, `b-${page}`);
    }
    await sim.run(6_000);
    // Healed, both compare at once; dc2 answers dc1's summary slowly, so dc1's answer to dc2's
    // summary reaches dc2 while it reads.
    slow.delayMs = 1_000;
    sim.link("dc1", "dc2");
    await sim.run(15_000);
    await expectEverywhere(sim, ["dc1", "dc2"], new Map(pages.map((page) => [page, 3])));
    for (const dc of ["dc1", "dc2"]) {
      expect(
        await sim.dc(dc).metric('livecount_counter_anti_entropy_pages_total{direction="sent"}'),
        dc,
      ).toBe(pages.length);
    }
  });

  test("counter - a DC whose heartbeats wait behind anti-entropy entries stays live while they come", async () => {
    sim = new DcSimulation();
    sim.add("dc1");
    sim.add("dc2");
    sim.link("dc1", "dc2");
    await sim.startAll(["dc1", "dc2"]);
    await sim.run(2_000);
    expect(await sim.dc("dc1").dcUp("dc2")).toBe(true);
    // dc2's heartbeats held up on the way (as behind a heal's megabytes of entries on a NATS
    // gateway); what anti-entropy sends from dc2 still arrives, for longer than dc2's lease (5 s).
    sim.drop = (from, _to, subject) => from === "dc2" && subject === DCS_SUBJECT;
    const summary = encodeMessage({ type: "ae_summary", from: "dc2", to: "dc1", digests: [] });
    for (let s = 0; s < 8; s++) {
      sim.dc("dc2").bus.publish(antiEntropySubject("dc1"), summary);
      await sim.run(1_000);
    }
    expect(await sim.dc("dc1").dcUp("dc2")).toBe(true);
    // Silent in every way for longer than the lease: down, as before.
    await sim.run(6_000);
    expect(await sim.dc("dc1").dcUp("dc2")).toBe(false);
    sim.drop = undefined;
    await sim.run(1_000);
    expect(await sim.dc("dc1").dcUp("dc2")).toBe(true);
  });

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
    await expectEverywhere(sim, ["dc1", "dc2"], truth);
  }, 60_000);

  /** Two linked DCs with `pages` pages liked on both sides while apart; resolves with the truth. */
  async function apartWithLikes(pages: number): Promise<Map<string, number>> {
    sim = new DcSimulation();
    sim.add("dc1");
    sim.add("dc2");
    sim.link("dc1", "dc2");
    await sim.startAll(["dc1", "dc2"]);
    sim.cut("dc1", "dc2");
    const truth = new Map<string, number>();
    for (let i = 0; i < pages; i++) {
      await sim.dc("dc1").increment(`lost-${i}`, "likes", 1, `a-${i}`);
      await sim.dc("dc2").increment(`lost-${i}`, "likes", 2, `b-${i}`);
      truth.set(`lost-${i}`, 3);
    }
    // Past the DC lease (5 s): each side has seen the other go down.
    await sim.run(8_000);
    return truth;
  }

  /** Pages whose likes differ between the two DCs. */
  async function disagreeing(truth: ReadonlyMap<string, number>): Promise<string[]> {
    const pages = [];
    for (const page of truth.keys()) {
      const [a, b] = [await sim.dc("dc1").value(page, "likes"), await sim.dc("dc2").value(page, "likes")];
      if (a !== b) pages.push(page);
    }
    return pages;
  }

  test("counter - comparisons lost while a link comes back are made again a second later", async () => {
    const truth = await apartWithLikes(30);
    // Every anti-entropy message is lost for the first half second of the link (one direction of a
    // NATS gateway link may come back before the other).
    sim.drop = (_from, _to, subject) => subject.startsWith("lc.ae.");
    sim.link("dc1", "dc2");
    await sim.run(500);
    sim.drop = undefined;
    expect((await disagreeing(truth)).length).toBe(30);
    await sim.run(2_500);
    await expectEverywhere(sim, ["dc1", "dc2"], truth);
  });

  test("counter - a merge the store applied but whose answer was lost (a timeout) still reaches the pages in memory", async () => {
    sim = new DcSimulation();
    const dc1 = sim.add("dc1");
    sim.add("dc2");
    const store = new AnswerLosingStore({ now: () => sim.clock.now() });
    dc1.store = store;
    sim.link("dc1", "dc2");
    await sim.startAll(["dc1", "dc2"]);
    sim.cut("dc1", "dc2");
    const truth = new Map<string, number>();
    for (let i = 0; i < 20; i++) {
      // Liked on both sides: each DC's actor of the page is in memory when the other's entry comes.
      await sim.dc("dc1").increment(`p${i}`, "likes", 1, `a-${i}`);
      await sim.dc("dc2").increment(`p${i}`, "likes", 2, `b-${i}`);
      truth.set(`p${i}`, 3);
    }
    await sim.run(8_000);
    // Every anti-entropy merge into dc1's store applies, then fails as a timed-out call would: the
    // stores end identical, so no comparison sends those pages again.
    store.loseMergeAnswers = true;
    sim.link("dc1", "dc2");
    await sim.run(5_000);
    expect(store.lostMergeAnswers).toBeGreaterThan(0);
    await expectEverywhere(sim, ["dc1", "dc2"], truth);
  });

  test("counter - an exchange whose last messages are lost goes silent, and is compared again once it stalls", async () => {
    const truth = await apartWithLikes(30);
    // For 6 s, every message that ends a transfer from dc2 (its pages, then `done`) is lost: the
    // exchanges dc1 drives never finish, and dc1 drives them again only once they stall (10 s).
    sim.drop = (from, _to, subject, data) => {
      if (from !== "dc2" || !subject.startsWith("lc.ae.")) return false;
      const msg = decodeMessage(data);
      return msg.type === "ae_entries" && msg.done === true;
    };
    sim.link("dc1", "dc2");
    await sim.run(6_000);
    sim.drop = undefined;
    expect((await disagreeing(truth)).length).toBeGreaterThan(0);
    await sim.run(10_000);
    await expectEverywhere(sim, ["dc1", "dc2"], truth);
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
    await expectEverywhere(sim, ["a", "b", "c"], truth);
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
    await expectEverywhere(sim, ["a", "b", "c"], truth);
  });
  test("counter - empty pages leave the store, and a viewer who comes back counts in every DC, even one that kept an old copy", async () => {
    sim = new DcSimulation();
    const common = { LIVECOUNT_GATEWAY_LEASE_MS: "86400000" };
    // dc1 lets idle pages leave memory fast: the page comes back from nothing, not from an actor.
    sim.add("dc1", { ...common, LIVECOUNT_EMPTY_PAGE_TTL_S: "5", LIVECOUNT_PASSIVATE_MS: "1000" });
    // dc2 keeps empty pages for an hour: it holds on to its copies of dc1's old entries.
    sim.add("dc2", { ...common, LIVECOUNT_EMPTY_PAGE_TTL_S: "3600" });
    sim.link("dc1", "dc2");
    await sim.startAll(["dc1", "dc2"]);
    const pages = Array.from({ length: 40 }, (_, i) => `flood-${i}`);
    for (const page of pages) {
      await sim.dc("dc1").presence(page, `s:${page}`);
      await sim.dc("dc1").presence(page, `s:${page}`, false);
    }
    await sim.run(3_000);
    const listed = async (dc: string) => (await sim.dc(dc).store.listPages("flood-", undefined, 100)).pages;
    expect(await listed("dc1")).toHaveLength(pages.length);
    expect(await listed("dc2")).toHaveLength(pages.length);
    // Past the TTL dc1 holds none of them any more; a comparison with dc2 (after a cut) does not
    // bring them back, though dc2 still holds its copies.
    await sim.run(12_000);
    expect(await listed("dc1")).toEqual([]);
    expect(await sim.dc("dc1").store.load("flood-7")).toEqual({});
    sim.cut("dc1", "dc2");
    await sim.run(6_000);
    sim.link("dc1", "dc2");
    await sim.run(3_000);
    expect(await listed("dc1")).toEqual([]);
    expect(await listed("dc2")).toHaveLength(pages.length);
    // A viewer comes back to one of them in dc1: both DCs count it at once (no comparison runs
    // meanwhile: the one-day period), dc2's old copy of dc1's entry notwithstanding.
    await sim.dc("dc1").presence("flood-7", "v:back");
    await sim.run(500);
    expect(await sim.dc("dc1").value("flood-7", VIEWERS_COUNTER)).toBe(1);
    expect(await sim.dc("dc2").value("flood-7", VIEWERS_COUNTER)).toBe(1);
  });
});
