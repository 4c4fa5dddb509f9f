/**
 * Convergence across data centers from durable state alone, simulated in one process on one clock
 * (test/support/dc_simulation.ts): real counter nodes and stores, hours of clock time in seconds.
 */
import { DCS_SUBJECT, antiEntropySubject } from "@livecount/bus";
import { VIEWERS_COUNTER, decodeMessage, encodeMessage } from "@livecount/protocol";
import { MemoryStore, StoreError } from "@livecount/store";
import { afterEach, describe, expect, test } from "vitest";
import { DcSimulation, SIM_ENV, type DropRule } from "../../../test/support/dc_simulation.js";
import type { ManualClock } from "../../../test/support/manual_clock.js";
import { mulberry32, testSeed } from "../../../test/support/prng.js";

const HOUR_MS = 3_600_000;
/** The pages a new DC learns from its peer in the bootstrap tests. */
const LEARNT = Array.from({ length: 30 }, (_, i) => `learnt-${i}`);

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

/** A store whose bucket digests, read at once, arrive `delayMs` of clock time later (a busy Redis's answer), or fail. */
class LateBucketsStore extends MemoryStore {
  delayMs = 0;

  constructor(private readonly clock: ManualClock) {
    super({ now: () => clock.now() });
  }

  /** Reads of bucket digests still to fail, as a timed-out Redis call would. */
  failures = 0;

  override async bucketDigests(partition: number): Promise<string[]> {
    if (this.failures > 0) {
      this.failures--;
      throw new StoreError("redis bucketDigests failed: Command timed out");
    }
    const digests = await super.bucketDigests(partition);
    if (this.delayMs > 0) await new Promise<void>((resolve) => this.clock.setTimeout(resolve, this.delayMs));
    return digests;
  }
}

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

  /** Expects every DC to hold exactly `truth` (page -> likes), asking each DC's owner. */
  async function expectEverywhere(dcs: readonly string[], truth: ReadonlyMap<string, number>): Promise<void> {
    for (const dc of dcs) {
      const seen = new Map<string, number>();
      for (const page of truth.keys()) seen.set(page, await sim.dc(dc).value(page, "likes"));
      expect(seen, `likes in ${dc}`).toEqual(truth);
    }
  }

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
    await expectEverywhere(["dc1", "dc2"], new Map(pages.map((page) => [page, 3])));
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
    await expectEverywhere(["dc1", "dc2"], truth);
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
    await expectEverywhere(["dc1", "dc2"], truth);
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
    await expectEverywhere(["dc1", "dc2"], truth);
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
    await expectEverywhere(["dc1", "dc2"], truth);
  });

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

  /**
   * dc1 holds 30 pages with a like each; dc2, expecting dc1 as its peer, starts on an empty store
   * once `beforeLink` has set the link's conditions (given `lateDc`'s store, whose bucket digests
   * can be made late or fail). Resolves `settleMs` after dc2 is bootstrapped, every page checked in
   * both, with the time from the link to dc2 ready.
   */
  async function newDcLearns(
    lateDc: "dc1" | "dc2" | undefined,
    beforeLink: (late: LateBucketsStore) => void,
    settleMs: number,
  ): Promise<number> {
    sim = new DcSimulation();
    const dc1 = sim.add("dc1");
    const dc2 = sim.add("dc2", { LIVECOUNT_PEER_DCS: "dc1" });
    const late = new LateBucketsStore(sim.clock);
    if (lateDc !== undefined) sim.dc(lateDc).store = late;
    await sim.startAll(["dc1"]);
    for (const page of LEARNT) await dc1.increment(page, "likes", 1, `k-${page}`);
    await sim.run(2_000);
    beforeLink(late);
    const linkedAt = sim.clock.now();
    sim.link("dc1", "dc2");
    await dc2.start();
    await sim.until(() => dc2.node!.ready, "dc2 bootstrapped");
    const readyMs = sim.clock.now() - linkedAt;
    await sim.run(settleMs);
    await expectEverywhere(["dc1", "dc2"], new Map(LEARNT.map((page) => [page, 1])));
    return readyMs;
  }

  /** Every page went from dc1 to dc2 once, and nothing came back. */
  async function expectSentOnce(): Promise<void> {
    const sent = 'livecount_counter_anti_entropy_pages_total{direction="sent"}';
    expect(await sim.dc("dc1").metric(sent)).toBe(LEARNT.length);
    expect(await sim.dc("dc2").metric(sent)).toBe(0);
  }

  test("counter - a new DC learns each page once, though its peer compares with it too on first contact", async () => {
    // The new DC's bucket digests come late, as from a Redis busy with a bootstrap. While it drives
    // the transfer dc1 answered to its bootstrap request, dc1 compares with it again (the follow-up
    // after first contact): an answer read before dc1's pages merged, reaching dc1 after the
    // transfer ended, had dc1 send every page a second time.
    await newDcLearns("dc2", (late) => (late.delayMs = 1_500), 15_000);
    await expectSentOnce();
  });

  test("counter - a new DC and its peer each deciding to drive before the other's pull arrives: the new DC drives, alone", async () => {
    // dc2's answer to dc1's own first comparison comes after its bootstrap request (1 s late), and
    // each side's pull takes 2 s to reach the other: dc1 would drive on that answer, and dc2 on
    // dc1's answer to its request, neither seeing the other's pull in time.
    await newDcLearns(
      undefined,
      () =>
        (sim.delay = (from, _to, subject, data) => {
          if (!subject.startsWith("lc.ae.")) return 0;
          const msg = decodeMessage(data);
          if (msg.type === "ae_entries" && msg.pull !== undefined) return 2_000;
          return from === "dc2" && msg.type === "ae_buckets" && msg.bootstrap !== true ? 1_000 : 0;
        }),
      15_000,
    );
    await expectSentOnce();
  });

  /**
   * The comparisons each DC starts on first contact are lost (one direction of a link comes back
   * later than the other), so the new DC's bootstrap requests start its exchanges; `lost` picks
   * other messages to lose.
   */
  function firstContactLost(
    lost: (from: string, msg: ReturnType<typeof decodeMessage>) => boolean,
  ): DropRule {
    const linkedAt = sim.clock.now();
    return (from, _to, subject, data) => {
      if (!subject.startsWith("lc.ae.")) return false;
      const msg = decodeMessage(data);
      const firstContact = msg.type === "ae_summary" && msg.bootstrap === undefined;
      return (firstContact && sim.clock.now() - linkedAt < 700) || lost(from, msg);
    };
  }

  test("counter - a new DC whose peer's answers to its requests are lost once is ready a second later, not after the peer's 3 s", async () => {
    const lostOnce = new Set<number>();
    const readyMs = await newDcLearns(
      undefined,
      () =>
        (sim.drop = firstContactLost((from, msg) => {
          if (from !== "dc1" || msg.type !== "ae_buckets" || msg.bootstrap !== true) return false;
          if (lostOnce.has(msg.partition)) return false;
          lostOnce.add(msg.partition);
          return true;
        })),
      5_000,
    );
    expect(lostOnce.size).toBeGreaterThan(0);
    // Asked again a second later, the peer left each partition to the learner, which drives it at
    // its next comparison with the peer (each had left it to the other before: ready after 4 s).
    expect(readyMs).toBeLessThan(2_500);
  });

  test("counter - a peer whose store fails to read a partition's buckets answers the new DC's next request, and keeps running", async () => {
    const readyMs = await newDcLearns(
      "dc1",
      (late) => {
        sim.drop = firstContactLost(() => false);
        // Every bucket-digest read of dc1 fails for a moment: the answers to the first requests.
        late.failures = Number(SIM_ENV.LIVECOUNT_PARTITIONS);
      },
      5_000,
    );
    expect(readyMs).toBeLessThan(2_500);
  });

  test("counter - a peer slow to answer a new DC's requests answers each partition once, however often it is asked", async () => {
    const requests = new Map<number, number>();
    const answers = new Map<number, number>();
    await newDcLearns(
      "dc1",
      (late) => {
        // dc1's bucket digests come 2.5 s after they are asked for (a busy Redis): the new DC asks
        // again each second meanwhile.
        late.delayMs = 2_500;
        sim.drop = (from, _to, subject, data) => {
          if (!subject.startsWith("lc.ae.")) return false;
          const msg = decodeMessage(data);
          if (from === "dc2" && msg.type === "ae_summary")
            for (const p of msg.bootstrap ?? []) requests.set(p, (requests.get(p) ?? 0) + 1);
          if (from === "dc1" && msg.type === "ae_buckets" && msg.bootstrap === true)
            answers.set(msg.partition, (answers.get(msg.partition) ?? 0) + 1);
          return false;
        };
      },
      10_000,
    );
    // Asked several times over, each partition that was answered was answered once.
    expect(Math.max(...requests.values())).toBeGreaterThan(1);
    expect(answers.size).toBeGreaterThan(0);
    expect(Math.max(...answers.values())).toBe(1);
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
    await expectEverywhere(["dc1", "dc2", "dc3"], truth);
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
    await expectEverywhere(["dc1", "dc2", "dc3"], new Map([["q", 2]]));
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
    await expectEverywhere(["dc1", "dc2"], new Map([["q", 3]]));
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
