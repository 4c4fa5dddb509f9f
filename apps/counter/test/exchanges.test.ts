import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { Exchanges } from "../src/exchanges.js";

describe("counter - anti-entropy exchanges", () => {
  function setUp(): { clock: ManualClock; x: Exchanges } {
    const clock = new ManualClock();
    return { clock, x: new Exchanges(clock) };
  }

  /** dc2 answered dc1's summary of partition 4 and dc1's buckets crossed it: left to dc1, counting take-backs. */
  function leftToDc1(x: Exchanges): { takenBack: number } {
    const seen = { takenBack: 0 };
    x.answered("dc1", 4);
    expect(x.leftToRemote("dc1", 4, "dc2", () => seen.takenBack++)).toBe(true);
    return seen;
  }

  test("counter - crossed comparisons: the DC whose name sorts first drives, the other takes it back after 3 s without entries", async () => {
    const { clock, x } = setUp();
    let takenBack = 0;
    // Not answered: no crossing, this node drives.
    expect(x.leftToRemote("dc1", 4, "dc2", () => takenBack++)).toBe(false);
    x.answered("dc1", 4);
    // dc1 sorts first: dc2 leaves the crossed comparison to it, once.
    expect(x.leftToRemote("dc1", 4, "dc2", () => takenBack++)).toBe(true);
    expect(x.leftToRemote("dc1", 4, "dc2", () => takenBack++)).toBe(true);
    await clock.advance(2_999);
    expect(takenBack).toBe(0);
    await clock.advance(1);
    expect(takenBack).toBe(1);
    // dc1 itself drives a crossed comparison with dc2.
    x.answered("dc2", 4);
    expect(x.leftToRemote("dc2", 4, "dc1", () => takenBack++)).toBe(false);
  });

  test("counter - a crossed comparison found crossed again is taken back 3 s after the first time, not later", async () => {
    const { clock, x } = setUp();
    const seen = leftToDc1(x);
    await clock.advance(2_000);
    expect(x.leftToRemote("dc1", 4, "dc2", () => seen.takenBack++)).toBe(true);
    await clock.advance(1_000);
    expect(seen.takenBack).toBe(1);
    await clock.advance(5_000);
    expect(seen.takenBack).toBe(1);
  });

  test("counter - a crossed comparison is not taken back while the other DC keeps sending: after 3 s of its silence", async () => {
    const { clock, x } = setUp();
    const seen = leftToDc1(x);
    // dc1's entries of other partitions keep coming (its pull of 4 waits behind them here).
    for (let t = 0; t < 10_000; t += 1_000) {
      x.heard("dc1");
      await clock.advance(1_000);
    }
    expect(seen.takenBack).toBe(0);
    // Another DC sending says nothing about dc1.
    x.heard("dc3");
    await clock.advance(1_999);
    expect(seen.takenBack).toBe(0);
    await clock.advance(1);
    expect(seen.takenBack).toBe(1);
  });

  test("counter - a crossed comparison this node drives after all is not taken back once its transfer is done", async () => {
    const { clock, x } = setUp();
    const seen = leftToDc1(x);
    // Driven from here anyway (the other DC's buckets came before this node's answer was sent).
    x.progress("dc1", 4, () => {});
    x.done("dc1", 4);
    await clock.advance(10_000);
    expect(seen.takenBack).toBe(0);
  });

  test("counter - a crossed comparison the other DC drives is not taken back; an old answer crosses nothing", async () => {
    const { clock, x } = setUp();
    let takenBack = 0;
    x.answered("dc1", 4);
    expect(x.leftToRemote("dc1", 4, "dc2", () => takenBack++)).toBe(true);
    x.remoteDrives("dc1", 4);
    await clock.advance(10_000);
    expect(takenBack).toBe(0);
    x.answered("dc1", 5);
    await clock.advance(5_000);
    x.prune();
    expect(x.leftToRemote("dc1", 5, "dc2", () => takenBack++)).toBe(false);
  });

  test("counter - a driven exchange stalls after 10 s without progress, and each progress starts the wait again", async () => {
    const { clock, x } = setUp();
    let stalls = 0;
    x.progress("dc2", 7, () => stalls++);
    expect(x.isDriving("dc2", 7)).toBe(true);
    await clock.advance(9_000);
    x.progress("dc2", 7, () => stalls++);
    await clock.advance(9_000);
    expect(stalls).toBe(0);
    await clock.advance(1_000);
    expect(stalls).toBe(1);
    expect(x.isDriving("dc2", 7)).toBe(false);
  });

  test("counter - done ends a driven exchange and counts as exchanged since the DC was heard; one that moved while the DC was down is kept", async () => {
    const { clock, x } = setUp();
    const stalls: number[] = [];
    x.forget("dc2", "up");
    x.progress("dc2", 1, () => stalls.push(1));
    x.progress("dc2", 2, () => stalls.push(2));
    x.done("dc2", 1);
    expect(x.isDriving("dc2", 1)).toBe(false);
    // 1 is exchanged, 2 is in flight, 3 was never compared.
    expect(x.notExchanged("dc2", [1, 2, 3])).toEqual([3]);
    x.progress("dc-3", 5, () => stalls.push(5));
    expect(x.inFlight()).toEqual({ dc2: 1, "dc-3": 1 });
    // dc2 declared down while its pages of 2 keep coming (its heartbeats late behind a heal's
    // entries), then heard again: 2 is still under way, neither driven again nor offered to dc2.
    await clock.advance(100);
    x.forget("dc2", "down");
    await clock.advance(100);
    x.received("dc2", 2);
    x.forget("dc2", "up");
    expect(x.inFlight()).toEqual({ dc2: 1, "dc-3": 1 });
    expect(x.isDriving("dc2", 2)).toBe(true);
    expect(x.notExchanged("dc2", [1, 2, 3])).toEqual([1, 3]);
    x.done("dc-3", 5);
    expect(x.inFlight()).toEqual({ dc2: 1 });
    // Lost after all: it ends by its own silence, and is compared again then.
    await clock.advance(10_000);
    expect(stalls).toEqual([2]);
    expect(x.isDriving("dc2", 2)).toBe(false);
    expect(x.notExchanged("dc2", [1, 2, 3])).toEqual([1, 2, 3]);
  });

  test("counter - what nothing moved while the DC was down was cut with the link: dropped when it is up; a gap drops everything", async () => {
    const { clock, x } = setUp();
    const stalls: number[] = [];
    x.forget("dc2", "up");
    x.progress("dc2", 1, () => stalls.push(1));
    x.progress("dc2", 2, () => stalls.push(2));
    x.remoteDrives("dc2", 3);
    x.remoteDrives("dc2", 4);
    await clock.advance(100);
    // 5's pull came, and 6 started, in the very moment dc2 went down: nothing since.
    x.remoteDrives("dc2", 5);
    x.progress("dc2", 6, () => stalls.push(6));
    x.forget("dc2", "down");
    await clock.advance(100);
    // Only 2 and 4 hear from dc2 while it is down (1 only sends, which proves nothing of the link);
    // a second down changes nothing.
    x.progress("dc2", 1, () => stalls.push(1));
    x.received("dc2", 2);
    x.received("dc2", 4);
    x.forget("dc2", "down");
    x.forget("dc2", "up");
    expect([1, 2, 6].map((p) => x.isDriving("dc2", p))).toEqual([false, true, false]);
    expect(x.notExchanged("dc2", [1, 2, 3, 4, 5, 6])).toEqual([1, 3, 5, 6]);
    // Heard with heartbeats missing: messages were lost, nothing in flight is kept.
    x.forget("dc2", "gap");
    expect(x.inFlight()).toEqual({});
    expect(x.notExchanged("dc2", [1, 2, 3, 4])).toEqual([1, 2, 3, 4]);
    await clock.advance(20_000);
    expect(stalls).toEqual([]);
  });

  test("counter - an exchange the remote drives is left out of follow-ups while its pages come, until its done or 10 s of silence", async () => {
    const { clock, x } = setUp();
    x.forget("dc2", "up");
    // dc2 drives 1 and 2 (their pulls came); its pages of 1 are all here, those of 2 are not.
    x.remoteDrives("dc2", 1);
    x.remoteDrives("dc2", 2);
    x.done("dc2", 1);
    // 1 is exchanged, 2 is under way (compared now, it would differ while its pages merge).
    expect(x.notExchanged("dc2", [1, 2, 3])).toEqual([3]);
    // Another DC's comparisons are their own.
    expect(x.notExchanged("dc-3", [2])).toEqual([2]);
    x.remoteDrives("dc2", 4);
    x.dropPartition(4);
    expect(x.notExchanged("dc2", [4])).toEqual([4]);
    // Heard again: 2's pages are still coming, so it is still under way; 1 is to compare again.
    x.forget("dc2", "up");
    expect(x.notExchanged("dc2", [1, 2, 3])).toEqual([1, 3]);
    // Each page of it that comes starts the wait again; a page of an exchange it does not drive
    // starts nothing.
    await clock.advance(9_000);
    x.received("dc2", 2);
    x.received("dc2", 3);
    await clock.advance(9_000);
    // Pruning keeps what is still under way.
    x.prune();
    expect(x.notExchanged("dc2", [2, 3])).toEqual([3]);
    // Silent for 10 s: taken for lost (the remote's own stall compares it again), and pruned.
    await clock.advance(1_000);
    expect(x.notExchanged("dc2", [2, 3])).toEqual([2, 3]);
    x.prune();
    x.received("dc2", 2);
    expect(x.notExchanged("dc2", [2])).toEqual([2]);
  });

  test("counter - a dropped partition stops its timers, other partitions keep theirs", async () => {
    const { clock, x } = setUp();
    const fired: string[] = [];
    x.progress("dc2", 1, () => fired.push("stalled 1"));
    x.progress("dc2", 11, () => fired.push("stalled 11"));
    for (const p of [1, 11]) {
      x.answered("dc1", p);
      expect(x.leftToRemote("dc1", p, "dc2", () => fired.push(`taken back ${p}`))).toBe(true);
    }
    x.dropPartition(1);
    await clock.advance(10_000);
    expect(fired.sort()).toEqual(["stalled 11", "taken back 11"]);
  });

  test("counter - an answer crosses the remote's digests for 5 s, not a moment longer", async () => {
    const { clock, x } = setUp();
    x.answered("dc1", 1);
    x.answered("dc1", 2);
    await clock.advance(4_999);
    expect(x.leftToRemote("dc1", 1, "dc2", () => {})).toBe(true);
    await clock.advance(1);
    expect(x.leftToRemote("dc1", 2, "dc2", () => {})).toBe(false);
  });

  test("counter - a DC's request to learn a partition is left to the answer being read, until it is sent or 3 s", async () => {
    const { clock, x } = setUp();
    expect(x.teaches("dc2", 4)).toBe(true);
    // Asked again each second while the first answer is still being read: left to it.
    await clock.advance(1_000);
    expect(x.teaches("dc2", 4)).toBe(false);
    // Another partition, another DC: their own requests.
    expect(x.teaches("dc2", 5)).toBe(true);
    expect(x.teaches("dc3", 4)).toBe(true);
    // Sent (or given up): the next request is answered, lost answer or not.
    x.taught("dc2", 4);
    expect(x.teaches("dc2", 4)).toBe(true);
    // A read that never ends holds a repeat back 3 s at most.
    await clock.advance(2_999);
    expect(x.teaches("dc2", 4)).toBe(false);
    await clock.advance(1);
    expect(x.teaches("dc2", 4)).toBe(true);
    // The DC went down and came back, or the partition changed hands: what was being answered is moot.
    expect(x.teaches("dc3", 4)).toBe(true);
    x.forget("dc2", "down");
    expect(x.teaches("dc2", 4)).toBe(true);
    expect(x.teaches("dc3", 4)).toBe(false);
    x.dropPartition(4);
    expect(x.teaches("dc3", 4)).toBe(true);
    // Pruning keeps what still holds back a request, and forgets the rest.
    x.prune();
    expect(x.teaches("dc3", 4)).toBe(false);
    await clock.advance(3_000);
    x.prune();
    x.clear();
    expect(x.teaches("dc3", 4)).toBe(true);
  });

  test("counter - a DC learning a partition from this node counts as learning until its done, for 10 s at most", async () => {
    const { clock, x } = setUp();
    expect(x.isLearning("dc2", 4)).toBe(false);
    x.learns("dc2", 4);
    x.learns("dc2", 5);
    expect(x.isLearning("dc2", 4)).toBe(true);
    expect(x.isLearning("dc3", 4)).toBe(false);
    // Its transfer ended: learnt.
    x.done("dc2", 4);
    expect(x.isLearning("dc2", 4)).toBe(false);
    // A learner whose transfer never comes stops counting 10 s after it asked.
    await clock.advance(9_999);
    expect(x.isLearning("dc2", 5)).toBe(true);
    await clock.advance(1);
    expect(x.isLearning("dc2", 5)).toBe(false);
    x.prune();
    // Forgetting the DC, dropping the partition or clearing ends it at once.
    for (const end of [() => x.forget("dc2", "up"), () => x.dropPartition(6), () => x.clear()]) {
      x.learns("dc2", 6);
      end();
      expect(x.isLearning("dc2", 6)).toBe(false);
    }
  });

  test("counter - pruning keeps the answers that can still cross", () => {
    const { x } = setUp();
    x.answered("dc1", 4);
    x.prune();
    expect(x.leftToRemote("dc1", 4, "dc2", () => {})).toBe(true);
  });

  test("counter - forgetting a DC drops its answers and take-back timers only, not its transfers or another DC's", async () => {
    const { clock, x } = setUp();
    const fired: string[] = [];
    for (const remote of ["dc1", "dc3"]) {
      x.answered(remote, 4);
      x.answered(remote, 5);
      x.progress(remote, 4, () => fired.push(`stalled ${remote}`));
    }
    expect(x.leftToRemote("dc3", 4, "dc4", () => fired.push("taken back dc3"))).toBe(true);
    expect(x.leftToRemote("dc1", 5, "dc4", () => fired.push("taken back dc1"))).toBe(true);
    x.forget("dc1", "down");
    expect(x.isDriving("dc1", 4)).toBe(true);
    expect(x.isDriving("dc3", 4)).toBe(true);
    // dc1's answers went with it: nothing crosses any more.
    expect(x.leftToRemote("dc1", 4, "dc2", () => fired.push("taken back dc1"))).toBe(false);
    // dc3's answers still cross.
    expect(x.leftToRemote("dc3", 5, "dc4", () => {})).toBe(true);
    await clock.advance(10_000);
    expect(fired.sort()).toEqual(["stalled dc1", "stalled dc3", "taken back dc3"]);
  });

  test("counter - while a DC is down, a late done from it counts as no exchange", () => {
    const { x } = setUp();
    x.forget("dc2", "up");
    x.forget("dc2", "down");
    x.done("dc2", 1);
    expect(x.notExchanged("dc2", [1, 2])).toEqual([1, 2]);
    // A done from a DC never heard is as harmless.
    x.done("dc9", 1);
    expect(x.notExchanged("dc9", [1])).toEqual([1]);
  });

  test("counter - clear stops every timer and forgets every exchange", async () => {
    const { clock, x } = setUp();
    const fired: string[] = [];
    x.forget("dc2", "up");
    x.progress("dc2", 1, () => fired.push("stalled"));
    x.done("dc2", 3);
    x.answered("dc1", 4);
    expect(x.leftToRemote("dc1", 4, "dc2", () => fired.push("taken back"))).toBe(true);
    x.clear();
    await clock.advance(20_000);
    expect(fired).toEqual([]);
    expect(x.isDriving("dc2", 1)).toBe(false);
    expect(x.notExchanged("dc2", [1, 3])).toEqual([1, 3]);
    x.answered("dc1", 5);
    x.clear();
    expect(x.leftToRemote("dc1", 5, "dc2", () => {})).toBe(false);
  });
});
