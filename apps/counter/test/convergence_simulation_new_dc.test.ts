/**
 * A new data center learning every page from its peer before it serves, simulated in one process on
 * one clock (test/support/dc_simulation.ts): each page sent once, and the bootstrap finished on time
 * when the peer's answers come late, are lost or fail.
 */
import { decodeMessage } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { MemoryStore, StoreError, type Fence, type Lease, type PageRecord } from "@livecount/store";
import { afterEach, describe, expect, test } from "vitest";
import { DcSimulation, SIM_ENV, type DropRule, type SimDc } from "../../../test/support/dc_simulation.js";
import type { ManualClock } from "../../../test/support/manual_clock.js";
import { expectEverywhere } from "./expect_everywhere.js";

/** The pages a new DC learns from its peer in the bootstrap tests. */
const LEARNT = Array.from({ length: 30 }, (_, i) => `learnt-${i}`);

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

/**
 * A store whose lease renewals are made at once but answered `answerDelayMs` of clock time later,
 * once (a Redis that stalled after it wrote): the leases stay this node's in the store, and run out
 * in the node's own view until the answer comes. The first read of each partition's bootstrap mark
 * can be answered `markReadDelayMs` late too.
 */
class LateRenewalStore extends MemoryStore {
  answerDelayMs = 0;
  markReadDelayMs = 0;
  readonly #marksRead = new Set<number>();

  constructor(private readonly clock: ManualClock) {
    super({ now: () => clock.now() });
  }

  override async renew(leases: readonly Lease[], ttlMs: number): Promise<Lease[]> {
    const renewed = await super.renew(leases, ttlMs);
    const delayMs = this.answerDelayMs;
    this.answerDelayMs = 0;
    await this.#late(delayMs);
    return renewed;
  }

  override async isBootstrapped(partition: number): Promise<boolean> {
    const marked = await super.isBootstrapped(partition);
    if (!this.#marksRead.has(partition)) {
      this.#marksRead.add(partition);
      await this.#late(this.markReadDelayMs);
    }
    return marked;
  }

  async #late(ms: number): Promise<void> {
    if (ms > 0) await new Promise<void>((resolve) => this.clock.setTimeout(resolve, ms));
  }
}

/**
 * A store where another node takes the partition of the first pages merged into it, as that merge
 * goes out (the holder had stalled), and hands it back 200 ms later; it records, when a partition
 * is marked bootstrapped, how many of its learnt pages lack dc1's entry by then.
 */
class TakenOnceStore extends MemoryStore {
  taken: number | undefined;
  readonly marks: Array<{ partition: number; missing: number }> = [];

  constructor(private readonly clock: ManualClock) {
    super({ now: () => clock.now() });
  }

  override async mergePages(
    fence: Fence,
    pages: ReadonlyMap<string, PageRecord>,
    indexedDc: string,
  ): Promise<Map<string, PageRecord> | null> {
    if (this.taken === undefined && pages.size > 0) {
      this.taken = fence.partition;
      const lease = await this.acquire(fence.partition, "intruder", 60_000, { reclaimFrom: fence.node });
      this.clock.setTimeout(() => void this.release(lease!), 200);
    }
    return super.mergePages(fence, pages, indexedDc);
  }

  override async markBootstrapped(fence: Fence): Promise<boolean> {
    const marked = await super.markBootstrapped(fence);
    if (marked) {
      const learnt = LEARNT.filter(
        (page) => partitionOf(page, Number(SIM_ENV.LIVECOUNT_PARTITIONS)) === fence.partition,
      );
      let stored = 0;
      for (const page of learnt) if ((await this.load(page)).likes?.dc1 !== undefined) stored++;
      this.marks.push({ partition: fence.partition, missing: learnt.length - stored });
    }
    return marked;
  }
}

describe("counter - convergence across data centers (simulated clock)", () => {
  let sim: DcSimulation;
  afterEach(async () => sim.stop());

  /** A new simulation of dc1 and dc2, which expects dc1 as its peer: neither started nor linked. */
  function newPair() {
    sim = new DcSimulation();
    return { dc1: sim.add("dc1"), dc2: sim.add("dc2", { LIVECOUNT_PEER_DCS: "dc1" }) };
  }

  /** Starts dc1 alone and gives each of the 30 learnt pages a like there; 2 s of clock pass. */
  async function seedDc1(dc1: SimDc): Promise<void> {
    await sim.startAll(["dc1"]);
    for (const page of LEARNT) await dc1.increment(page, "likes", 1, `k-${page}`);
    await sim.run(2_000);
  }

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
    const { dc1, dc2 } = newPair();
    const late = new LateBucketsStore(sim.clock);
    if (lateDc !== undefined) sim.dc(lateDc).store = late;
    await seedDc1(dc1);
    beforeLink(late);
    const linkedAt = sim.clock.now();
    sim.link("dc1", "dc2");
    await dc2.start();
    await sim.until(() => dc2.node!.ready, "dc2 bootstrapped");
    const readyMs = sim.clock.now() - linkedAt;
    await sim.run(settleMs);
    await expectEverywhere(sim, ["dc1", "dc2"], new Map(LEARNT.map((page) => [page, 1])));
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

  test.each([
    ["its transfers arriving after", 0, 9_800],
    ["its transfers arriving after, its mark read 8.3 s late", 8_300, 9_800],
    ["its transfers arriving during it", 0, 9_000],
  ])(
    "counter - a new DC bootstrapping while its leases ran out in its own view (%s) loses nothing that came meanwhile",
    async (_, markReadDelayMs, transferMs) => {
      const { dc1, dc2 } = newPair();
      const late = new LateRenewalStore(sim.clock);
      dc2.store = late;
      await seedDc1(dc1);
      // dc2's first renewal, as it takes its partitions, is answered 9.7 s later: its 8 s leases run
      // out in its own view from 8 s to 9.7 s, though nobody takes them. dc1's transfers take
      // `transferMs` to arrive.
      late.answerDelayMs = 9_700;
      late.markReadDelayMs = markReadDelayMs;
      sim.delay = (from, _to, subject, data) =>
        from === "dc1" && subject.startsWith("lc.ae.") && decodeMessage(data).type === "ae_entries"
          ? transferMs
          : 0;
      sim.link("dc1", "dc2");
      await dc2.launch();
      await sim.run(8_500);
      expect(dc2.node!.ready).toBe(false);
      // A like at dc1 while dc2 serves nothing: the transfers under way were read before it, so
      // only its live update brings it. Merged under the lease dc2 still holds, it is not lost.
      await dc1.increment(LEARNT[0]!, "likes", 1, "k-during-lapse");
      await sim.until(() => dc2.node!.ready, "dc2 bootstrapped");
      // Anti-entropy runs once a day here: what dc2 serves once ready is what it merged.
      await expectEverywhere(sim, ["dc1", "dc2"], new Map(LEARNT.map((page, i) => [page, i === 0 ? 2 : 1])));
    },
  );

  test("counter - a transfer the store refused in part (the partition taken and handed back meanwhile) teaches nothing: the partition learns again", async () => {
    const { dc1, dc2 } = newPair();
    const store = new TakenOnceStore(sim.clock);
    dc2.store = store;
    await seedDc1(dc1);
    sim.link("dc1", "dc2");
    await dc2.launch();
    await sim.until(() => dc2.node!.ready, "dc2 bootstrapped");
    expect(store.taken).toBeDefined();
    // Each partition marked with every page it learnt stored, the refused one included.
    expect(store.marks.filter((m) => m.missing !== 0)).toEqual([]);
    expect(store.marks.map((m) => m.partition)).toContain(store.taken);
    await expectEverywhere(sim, ["dc1", "dc2"], new Map(LEARNT.map((page) => [page, 1])));
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
});
