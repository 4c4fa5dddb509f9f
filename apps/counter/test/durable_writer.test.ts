import {
  VIEWERS_COUNTER,
  type IncrementRequest,
  type NodeReply,
  type ResetRequest,
} from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import { dcUpdatesSubject } from "@livecount/bus";
import type { PageRecord } from "@livecount/store";
import { COALESCE_MS, DC, buildUnits, pageIn, type Units } from "./units.js";

/**
 * Every publish in the timeline follows a completed store call that wrote its page, with no other
 * store call started in between: nothing reaches the bus ahead of the store.
 */
function publishesFollowDurableWrites(timeline: readonly string[]): void {
  let durable = new Set<string>();
  for (const event of timeline) {
    const done = /^(?:write|increment):done:(.*)$/.exec(event);
    if (done !== null) durable = new Set(done[1]!.split(","));
    else if (event.endsWith(":start") || event.endsWith(":failed")) durable = new Set();
    else if (event.startsWith("publish:") && !durable.has(event.slice("publish:".length)))
      throw new Error(`published ahead of the store: ${timeline.join(" ")}`);
  }
}

describe("counter - durable writer", () => {
  let u: Units;
  afterEach(async () => u.close());

  function increment(page: string, partition: number, key: string, delta = 1): Promise<NodeReply> {
    const request: IncrementRequest = { type: "increment", page, counter: "likes", delta, key };
    return u.registry.run(page, partition, (actor) => u.writer.increment(actor, request));
  }

  /** A gateway's presence batch: viewer v:1 joined `page` (in `partition`, 1 by default). */
  function joinOne(page: string, partition = 1): Promise<unknown> {
    return u.intake.batch({
      type: "presence",
      gateway: "gw",
      partition,
      ops: [{ page, viewer: "v:1", present: true }],
    });
  }

  /** Page i (in partition i + 1) gets a viewer, its partition held here: one partition per page. */
  async function joinEach(pages: readonly string[]): Promise<void> {
    for (const [i, page] of pages.entries()) {
      await u.acquire(i + 1);
      await joinOne(page, i + 1);
    }
  }

  function reset(page: string, partition: number, key: string, tombstone = false): Promise<NodeReply> {
    const request: ResetRequest = { type: "reset", page, counter: "likes", key, tombstone };
    return u.registry.run(page, partition, (actor) => u.writer.reset(actor, request));
  }

  test("counter - presence is published only after its write; failed writes publish nothing and are retried", async () => {
    u = await buildUnits();
    const page = pageIn(1);
    await u.acquire(1);
    u.store.failWrites = 2;
    await joinOne(page);
    await u.clock.advance(0);
    expect(u.timeline).toEqual(["write:start", "write:failed"]);
    expect(u.published).toEqual([]);
    await u.clock.advance(COALESCE_MS);
    expect(u.timeline).toEqual(["write:start", "write:failed", "write:start", "write:failed"]);
    expect(u.published).toEqual([]);
    await u.clock.advance(COALESCE_MS);
    expect(u.timeline.slice(4)).toEqual(["write:start", `write:done:${page}`, `publish:${page}`]);
    expect(u.published[0]?.counters[VIEWERS_COUNTER]).toEqual({ p: 1, n: 0 });
    expect((await u.store.load(page))[VIEWERS_COUNTER]?.dc1).toEqual({ p: 1, n: 0 });
    publishesFollowDurableWrites(u.timeline);
  });

  test("counter - the flush lag is the age of the oldest change not yet durable: 0 when none waits, growing while writes fail", async () => {
    u = await buildUnits();
    const page = pageIn(1);
    await u.acquire(1);
    expect(u.writer.flushLagMs).toBe(0);
    u.store.failWrites = 2;
    await joinOne(page);
    // Two failed flushes, a window apart: still waiting since the change.
    await u.clock.advance(0);
    await u.clock.advance(COALESCE_MS);
    expect(u.writer.flushLagMs).toBe(COALESCE_MS);
    await u.clock.advance(COALESCE_MS);
    expect(u.timeline.at(-2)).toBe(`write:done:${page}`);
    expect(u.writer.flushLagMs).toBe(0);
  });

  test("counter - a flush stops at LIVECOUNT_FLUSH_MAX_WRITES entries; the partitions past it go in the next flushes, oldest first", async () => {
    const pages = [pageIn(1), pageIn(2), pageIn(3)];
    // A join writes five entries before its visitor's register (viewers, active viewers, connections,
    // the minute's and the hour's peaks): one page reaches a bound of 3 on its own, its register
    // left for a flush with room.
    u = await buildUnits({ flushMaxWrites: 3 });
    await joinEach(pages);
    expect(u.registry.find(pages[0]!)!.unwrittenCount).toBeGreaterThanOrEqual(3);

    await u.clock.advance(0);
    expect(u.timeline).toEqual(["write:start", `write:done:${pages[0]}`, `publish:${pages[0]}`]);
    expect(u.writer.dirtyCount).toBe(3); // the first page's register waits behind the others
    expect(u.writer.flushLagMs).toBe(0); // the clock has not moved: the lag is still counted from the join
    await u.clock.advance(COALESCE_MS);
    expect(u.timeline.slice(3)).toEqual(["write:start", `write:done:${pages[1]}`, `publish:${pages[1]}`]);
    expect(u.writer.flushLagMs).toBe(COALESCE_MS);
    await u.clock.advance(COALESCE_MS);
    expect(u.timeline.slice(6)).toEqual(["write:start", `write:done:${pages[2]}`, `publish:${pages[2]}`]);
    expect(u.writer.flushLagMs).toBe(2 * COALESCE_MS);
    // Then the three registers, which fit the bound together.
    await u.clock.advance(COALESCE_MS);
    expect(u.timeline.slice(9, 11)).toEqual(["write:start", `write:done:${pages.join(",")}`]);
    expect(u.writer.dirtyCount).toBe(0);
    expect(u.writer.flushLagMs).toBe(0);
    for (const page of pages) {
      const own = (await u.store.load(page))[VIEWERS_COUNTER]?.dc1;
      expect(own!.p - own!.n).toBe(1);
    }
    publishesFollowDurableWrites(u.timeline);
  });

  test("counter - a flush takes a partition's dirty pages whole, past the bound: one script each, never split", async () => {
    const [a, b, other] = [pageIn(1, 0), pageIn(1, 1), pageIn(2)];
    u = await buildUnits({ flushMaxWrites: 3 });
    await u.acquire(1);
    await u.acquire(2);
    await joinOne(a);
    await joinOne(other, 2);
    await joinOne(b);
    await u.clock.advance(0);
    expect(u.timeline[1]).toBe(`write:done:${a},${b}`);
    expect(u.writer.dirtyCount).toBe(3); // with a's and b's registers
    await u.clock.advance(COALESCE_MS);
    await u.clock.advance(COALESCE_MS);
    expect(u.timeline.filter((e) => e.startsWith("write:done:"))).toEqual([
      `write:done:${a},${b}`,
      `write:done:${other}`,
      `write:done:${a},${b},${other}`,
    ]);
  });

  test("counter - draining (handover, shutdown) writes every dirty page, however many flushes that takes", async () => {
    const pages = [pageIn(1), pageIn(2), pageIn(3)];
    u = await buildUnits({ flushMaxWrites: 3 });
    await joinEach(pages);
    await u.writer.drain();
    expect(u.writer.dirtyCount).toBe(0);
    expect(u.timeline.filter((e) => e.startsWith("write:done:"))).toEqual([
      ...pages.map((page) => `write:done:${page}`),
      `write:done:${pages.join(",")}`, // their registers
    ]);
  });

  test("counter - draining stops when the store fails instead of retrying forever", async () => {
    u = await buildUnits({ flushMaxWrites: 3 });
    await u.acquire(1);
    await joinOne(pageIn(1, 0));
    u.store.failWrites = 100;
    await u.writer.drain().catch(() => {});
    expect(u.writer.dirtyCount).toBe(1);
    expect(u.timeline.filter((e) => e === "write:failed").length).toBeLessThanOrEqual(2);
    u.store.failWrites = 0;
  });

  /** `count` new visitors join `page` at once (in `partition`): each raises a register of the day, or most do. */
  function joinMany(page: string, partition: number, count: number, from = 0): Promise<unknown> {
    return u.intake.batch({
      type: "presence",
      gateway: "gw",
      partition,
      ops: Array.from({ length: count }, (_, i) => ({ page, viewer: `v:${from + i}`, present: true })),
    });
  }

  /** The unique-visitor registers the store holds for `page`. */
  async function storedRegisters(page: string): Promise<number> {
    return Object.keys(await u.store.load(page)).filter((name) => name.startsWith("@u:")).length;
  }

  test("counter - a flush at its bound writes every page's viewers before unique-visitor registers; the registers follow", async () => {
    const [crowded, quiet] = [pageIn(1), pageIn(2)];
    u = await buildUnits({ flushMaxWrites: 20 });
    await u.acquire(1);
    await u.acquire(2);
    await joinMany(crowded, 1, 60);
    await joinOne(quiet, 2);
    const crowdedActor = u.registry.find(crowded)!;
    const raised = crowdedActor.registersWaiting;
    expect(raised).toBeGreaterThan(40); // a few of the 60 share a register
    const quietActor = u.registry.find(quiet)!;
    expect(quietActor.registersWaiting).toBe(1);
    // Viewers, active viewers, connections and the peaks of both pages.
    const other = crowdedActor.unwrittenCount - raised + quietActor.unwrittenCount - 1;
    expect(other).toBe(10);

    await u.clock.advance(0);
    // Both pages' viewers are durable and published in the first flush; the registers fill the rest of the bound.
    expect(u.timeline.slice(0, 2)).toEqual(["write:start", `write:done:${crowded},${quiet}`]);
    expect(u.store.entriesWritten).toBe(20);
    for (const [page, viewers] of [
      [crowded, 60],
      [quiet, 1],
    ] as const) {
      const own = (await u.store.load(page))[VIEWERS_COUNTER]?.dc1;
      expect(own!.p - own!.n).toBe(viewers);
      expect(u.published.some((update) => update.page === page)).toBe(true);
    }
    expect(await storedRegisters(crowded)).toBe(20 - other);
    expect(u.writer.dirtyCount).toBe(2);

    // The next flushes write the registers left, up to the bound each, and nothing else.
    let flushes = 1;
    while (u.writer.dirtyCount > 0) {
      await u.clock.advance(COALESCE_MS);
      flushes++;
    }
    // The crowded page's registers before the quiet one's: the pages in the order they were taken.
    expect(flushes).toBe(1 + Math.ceil((raised + 1 - (20 - other)) / 20));
    expect(u.store.entriesWritten).toBe(other + raised + 1);
    expect(await storedRegisters(crowded)).toBe(raised);
    expect(await storedRegisters(quiet)).toBe(1);
    expect(crowdedActor.hasPendingWork).toBe(false);
    publishesFollowDurableWrites(u.timeline);
  });

  test("counter - registers wait only while the bound is full: under it, a flush writes them with everything else", async () => {
    const page = pageIn(1);
    u = await buildUnits();
    await u.acquire(1);
    await joinMany(page, 1, 60);
    const writes = u.registry.find(page)!.unwrittenCount;
    await u.clock.advance(0);
    expect(u.timeline.slice(0, 2)).toEqual(["write:start", `write:done:${page}`]);
    expect(u.store.entriesWritten).toBe(writes);
    expect(u.writer.dirtyCount).toBe(0);
  });

  test("counter - draining writes every register left, though no flush leaves fewer pages waiting", async () => {
    const [a, b] = [pageIn(1), pageIn(2)];
    u = await buildUnits({ flushMaxWrites: 10 });
    await u.acquire(1);
    await u.acquire(2);
    await joinMany(a, 1, 40);
    await joinMany(b, 2, 40, 1_000);
    const raised = [a, b].map((page) => u.registry.find(page)!.registersWaiting);
    await u.writer.drain();
    expect(u.writer.dirtyCount).toBe(0);
    expect([await storedRegisters(a), await storedRegisters(b)]).toEqual(raised);
  });

  test("counter - pages a flush cannot write (their fence late) leave the bound to the registers of the pages it writes", async () => {
    const crowded = pageIn(2);
    u = await buildUnits({ flushMaxWrites: 20 });
    await u.acquire(1);
    await u.acquire(2);
    await joinMany(crowded, 2, 60);
    await u.clock.advance(0);
    // Five pages of partition 1 come first in the next flushes, with more entries than the bound,
    // but their fence is gone: nothing of theirs is written, and the crowded page's registers are.
    for (let i = 0; i < 5; i++) await joinMany(pageIn(1, i), 1, 1, 5_000 + i);
    u.fences.delete(1);
    await u.writer.drain();
    expect(u.registry.find(crowded)!.registersWaiting).toBe(0);
    expect(u.writer.dirtyCount).toBe(5);
  });

  test("counter - registers waiting at midnight, and those of another DC, still go last and within the bound", async () => {
    const DAY_MS = 86_400_000;
    const [crowded, other] = [pageIn(1), pageIn(2)];
    u = await buildUnits({ flushMaxWrites: 20 });
    await u.acquire(1);
    await u.acquire(2);
    await joinMany(crowded, 1, 60);
    const raised = u.registry.find(crowded)!.registersWaiting;
    await u.clock.advance(0);
    expect(u.registry.find(crowded)!.registersWaiting).toBeGreaterThan(20);
    // The next day: a visitor names yesterday's registers still waiting; another DC's registers
    // arrive for the other page.
    u.clock.jump(DAY_MS);
    await u.acquire(1);
    await u.acquire(2);
    await joinMany(crowded, 1, 1, 9_000);
    const remote = Object.fromEntries(
      Array.from({ length: 30 }, (_, i) => [`@u:${Math.floor(u.clock.now() / DAY_MS)}:${i}`, { p: 2, n: 0 }]),
    );
    await u.registry.run(other, 2, (actor) => actor.mergeRemote("dc2", remote));
    expect(u.registry.find(other)!.registersWaiting).toBe(30);
    await joinOne(other, 2);
    // Every flush stays within the bound.
    const sizes: number[] = [];
    const write = u.store.write.bind(u.store);
    u.store.write = (groups, ...rest) => {
      sizes.push(groups.reduce((n, g) => n + g.writes.length, 0));
      return write(groups, ...rest);
    };
    while (u.writer.dirtyCount > 0) await u.clock.advance(COALESCE_MS);
    expect(sizes.length).toBeGreaterThan(3);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(20);
    const otherRecord = await u.store.load(other);
    expect(Object.keys(otherRecord).filter((name) => otherRecord[name]!.dc2 !== undefined)).toHaveLength(30);
    // Yesterday's registers, every one (today's are everyone present: a new day's visitors).
    const yesterday = `@u:${Math.floor(u.clock.now() / DAY_MS) - 1}:`;
    const crowdedRecord = await u.store.load(crowded);
    expect(Object.keys(crowdedRecord).filter((name) => name.startsWith(yesterday))).toHaveLength(raised);
    expect(u.registry.find(crowded)!.registersWaiting).toBe(0);
  });

  test("counter - a flush under its bound takes every dirty page in one write", async () => {
    const pages = [pageIn(1, 0), pageIn(1, 1), pageIn(1, 2)];
    u = await buildUnits();
    await u.acquire(1);
    for (const page of pages) await joinOne(page);
    const writes = pages.reduce((n, page) => n + u.registry.find(page)!.unwrittenCount, 0);
    await u.clock.advance(0);
    expect(u.timeline[1]).toBe(`write:done:${pages.join(",")}`);
    expect(u.store.entriesWritten).toBe(writes);
  });

  test("counter - an increment is acknowledged only after it is durable and published; a failed store answers unavailable and publishes nothing", async () => {
    u = await buildUnits();
    const page = pageIn(2);
    await u.acquire(2);
    u.store.failIncrements = 1;
    const first = increment(page, 2, "k1");
    await u.clock.advance(0);
    expect(await first).toMatchObject({ type: "error", code: "unavailable" });
    expect(u.published).toEqual([]);

    const retry = increment(page, 2, "k1").then((reply) => {
      u.timeline.push("reply");
      return reply;
    });
    await u.clock.advance(0);
    expect(await retry).toMatchObject({ type: "incremented", value: 1, duplicate: false });
    expect(u.timeline.slice(-4)).toEqual([
      "increment:start",
      `increment:done:${page}`,
      `publish:${page}`,
      "reply",
    ]);
    publishesFollowDurableWrites(u.timeline);
  });

  test("counter - a flush whose write failed for one partition publishes the others and writes that one again", async () => {
    u = await buildUnits();
    const [ok, down] = [pageIn(1), pageIn(2)];
    await u.acquire(1);
    await u.acquire(2);
    u.store.failPartitions.add(2);
    await Promise.all(
      [
        [ok, 1],
        [down, 2],
      ].map(([page, partition]) =>
        u.intake.batch({
          type: "presence",
          gateway: "gw",
          partition: partition as number,
          ops: [{ page: page as string, viewer: "v:1", present: true }],
        }),
      ),
    );
    await u.clock.advance(0);
    await u.clock.advance(COALESCE_MS);
    expect(u.published.map((update) => update.page)).toEqual([ok]);
    expect((await u.store.load(down))[VIEWERS_COUNTER]).toBeUndefined();
    expect(u.writer.flushLagMs).toBeGreaterThan(0);

    u.store.failPartitions.clear();
    await u.clock.advance(COALESCE_MS);
    expect(u.published.map((update) => update.page)).toEqual([ok, down]);
    expect((await u.store.load(down))[VIEWERS_COUNTER]?.dc1).toEqual({ p: 1, n: 0 });
    expect(u.writer.flushLagMs).toBe(0);
    publishesFollowDurableWrites(u.timeline);
  });

  test("counter - an increment whose part of the store failed answers unavailable; the rest of its batch is acknowledged", async () => {
    u = await buildUnits();
    const [ok, down] = [pageIn(3), pageIn(4)];
    await u.acquire(3);
    await u.acquire(4);
    u.store.failPartitions.add(4);
    const replies = Promise.all([increment(ok, 3, "a"), increment(down, 4, "b")]);
    await u.clock.advance(0);
    const [a, b] = await replies;
    expect(u.timeline.filter((e) => e === "increment:start")).toHaveLength(1);
    expect(a).toMatchObject({ type: "incremented", value: 1 });
    expect(b).toMatchObject({ type: "error", code: "unavailable" });
    expect(u.published.map((update) => update.page)).toEqual([ok]);

    u.store.failPartitions.clear();
    const retry = increment(down, 4, "b");
    await u.clock.advance(0);
    expect(await retry).toMatchObject({ type: "incremented", value: 1, duplicate: false });
  });

  test("counter - a retry of an increment that applied but whose answer was lost brings the owner's value up to the store's", async () => {
    u = await buildUnits();
    const page = pageIn(5);
    await u.acquire(5);
    u.store.loseIncrementAnswers = 1;
    const first = increment(page, 5, "k1", 3);
    await u.clock.advance(0);
    expect(await first).toMatchObject({ type: "error", code: "unavailable" });
    expect(u.published).toEqual([]);
    const retry = increment(page, 5, "k1", 3);
    await u.clock.advance(0);
    expect(await retry).toMatchObject({ type: "incremented", value: 3, duplicate: true });
    expect(u.published.at(-1)?.counters.likes).toEqual({ p: 3, n: 0 });
    const next = increment(page, 5, "k2", 1);
    await u.clock.advance(0);
    expect(await next).toMatchObject({ type: "incremented", value: 4, duplicate: false });
  });

  test("counter - a retried delete whose first answer was lost leaves the owner with the stored tombstone", async () => {
    u = await buildUnits();
    const page = pageIn(6);
    await u.acquire(6);
    const liked = increment(page, 6, "k1", 4);
    await u.clock.advance(0);
    expect(await liked).toMatchObject({ type: "incremented", value: 4 });
    u.store.loseIncrementAnswers = 1;
    const first = reset(page, 6, "d1", true);
    await u.clock.advance(0);
    expect(await first).toMatchObject({ type: "error", code: "unavailable" });
    const retry = reset(page, 6, "d1", true);
    await u.clock.advance(0);
    expect(await retry).toMatchObject({ type: "counter_reset", previous: 4, duplicate: true });
    const stored = await u.store.load(page);
    expect(stored["@del:likes"]?.dc1?.p).toBeGreaterThan(0);
    const held = await u.registry.run(page, 6, async (actor) => ({
      likes: actor.ownEntry("likes"),
      tomb: actor.ownEntry("@del:likes"),
    }));
    expect(held).toEqual({ likes: stored.likes?.dc1, tomb: stored["@del:likes"]?.dc1 });
  });

  test("counter - increments queued in one turn share one store round trip, and a repeated key counts once", async () => {
    u = await buildUnits();
    const page = pageIn(3);
    await u.acquire(3);
    const replies = Promise.all([
      increment(page, 3, "a"),
      increment(page, 3, "b", 5),
      increment(page, 3, "a"),
    ]);
    await u.clock.advance(0);
    const [a, b, again] = await replies;
    expect(u.timeline.filter((e) => e === "increment:start")).toHaveLength(1);
    expect(a).toMatchObject({ value: 1, duplicate: false });
    expect(b).toMatchObject({ value: 6, duplicate: false });
    expect(again).toMatchObject({ value: 1, duplicate: true });
    expect(u.published).toHaveLength(1);
    expect(u.published[0]?.counters.likes).toEqual({ p: 6, n: 0 });
  });

  test("counter - a reset is published before it is acknowledged, and a failed store answers unavailable", async () => {
    u = await buildUnits();
    const page = pageIn(4);
    await u.acquire(4);
    const inc = increment(page, 4, "k", 7);
    await u.clock.advance(0);
    await inc;
    u.store.failIncrements = 1;
    const failed = reset(page, 4, "r1");
    await u.clock.advance(0);
    expect(await failed).toMatchObject({ type: "error", code: "unavailable" });
    expect(u.published).toHaveLength(1);
    // The failed try recorded no key: the retry applies, published before its answer.
    const retried = reset(page, 4, "r1").then((reply) => {
      u.timeline.push("reply");
      return reply;
    });
    await u.clock.advance(0);
    expect(await retried).toMatchObject({ type: "counter_reset", previous: 7, duplicate: false });
    expect(u.timeline.slice(-2)).toEqual([`publish:${page}`, "reply"]);
    // The same key for another change conflicts and publishes nothing.
    const conflict = reset(page, 4, "r1", true);
    await u.clock.advance(0);
    expect(await conflict).toMatchObject({ type: "error", code: "idempotency_conflict" });
    expect(u.published).toHaveLength(2);
    const deleted = reset(page, 4, "r2", true);
    await u.clock.advance(0);
    expect(await deleted).toMatchObject({ type: "counter_reset", previous: 0, duplicate: false });
    expect(Object.keys(u.published.at(-1)!.counters).sort()).toEqual(["@del:likes", "likes"]);
    publishesFollowDurableWrites(u.timeline);
  });

  test("counter - a flush refused for a stale fence publishes nothing of that partition and reports it lost", async () => {
    u = await buildUnits();
    const [mine, stolen] = [pageIn(5), pageIn(6)];
    await u.acquire(5);
    const lease = await u.acquire(6);
    // Another node takes partition 6 behind this node's back.
    await u.store.release({ ...lease, node: "node-a", expiresAt: 0 });
    await u.store.acquire(6, "node-b", 60_000);
    await u.intake.batch({
      type: "presence",
      gateway: "gw",
      partition: 5,
      ops: [{ page: mine, viewer: "v", present: true }],
    });
    await u.intake.batch({
      type: "presence",
      gateway: "gw",
      partition: 6,
      ops: [{ page: stolen, viewer: "v", present: true }],
    });
    await u.clock.advance(0);
    expect(u.lost).toEqual([6]);
    expect(u.published.map((p) => p.page)).toEqual([mine]);
    expect(await u.store.load(stolen)).toEqual({});
  });

  test("counter - at most LIVECOUNT_AE_MERGES_IN_FLIGHT anti-entropy merges reach the store at once; the rest wait their turn", async () => {
    u = await buildUnits(); // MERGES_IN_FLIGHT (2) at once
    const fence = await u.acquire(2);
    u.timeline.length = 0;
    let release!: () => void;
    u.store.hold = new Promise((resolve) => (release = resolve));
    const merges = [0, 1, 2, 3].map((n) =>
      u.writer.mergeIntoStore(fence, new Map([[pageIn(2, n), { likes: { dc2: { p: n + 1, n: 0 } } }]])),
    );
    await u.clock.advance(0);
    expect(u.timeline.filter((e) => e === "write:start")).toHaveLength(2);
    u.store.hold = undefined;
    release();
    const advanced = await Promise.all(merges);
    expect(u.timeline.filter((e) => e === "write:start")).toHaveLength(4);
    expect(advanced.map((pages) => pages.size)).toEqual([1, 1, 1, 1]);
  });

  test("counter - entries learnt by anti-entropy are written first, then published for this DC's watchers only; a stale fence publishes nothing", async () => {
    u = await buildUnits();
    const [page, other] = [pageIn(2), pageIn(2, 1)];
    const fence = await u.acquire(2);
    await u.store.write([{ fence, writes: [{ page, counter: "likes", dc: "dc2", entry: { p: 3, n: 0 } }] }]);
    u.timeline.length = 0;
    const advanced = await u.writer.mergeIntoStore(
      fence,
      new Map<string, PageRecord>([
        [page, { likes: { dc2: { p: 2, n: 0 }, dc3: { p: 5, n: 1 } }, hearts: { dc1: { p: 4, n: 0 } } }],
        [other, { "@viewers": { dc2: { p: 7, n: 7 } } }],
      ]),
    );
    // dc2's likes were ahead here already; dc3's likes and this DC's own hearts advance.
    expect(Object.fromEntries(advanced)).toEqual({
      [page]: { likes: { dc3: { p: 5, n: 1 } }, hearts: { dc1: { p: 4, n: 0 } } },
    });
    publishesFollowDurableWrites(u.timeline);
    // One message, for this DC's gateways only, with what advanced.
    expect(u.published).toEqual([]);
    expect(u.batches).toEqual([
      {
        subject: dcUpdatesSubject(DC, 2),
        updates: {
          type: "updates",
          partition: 2,
          pages: { [page]: { likes: { dc3: { p: 5, n: 1 } }, hearts: { dc1: { p: 4, n: 0 } } } },
          ts: expect.any(Number),
        },
      },
    ]);

    u.batches.length = 0;
    const stale = { ...fence, epoch: fence.epoch + 1 };
    const refused = await u.writer.mergeIntoStore(
      stale,
      new Map([[page, { likes: { dc4: { p: 1, n: 0 } } }]]),
    );
    expect(refused.size).toBe(0);
    expect(u.batches).toEqual([]);
    expect(u.lost).toEqual([2]);
  });

  test("counter - drain commits queued increments and flushes every dirty page before it resolves", async () => {
    u = await buildUnits();
    const page = pageIn(7);
    await u.acquire(7);
    await u.intake.batch({
      type: "presence",
      gateway: "gw",
      partition: 7,
      ops: [{ page, viewer: "v", present: true }],
    });
    const inc = increment(page, 7, "k");
    await u.writer.drain();
    expect(await inc).toMatchObject({ type: "incremented" });
    expect(u.writer.dirtyCount).toBe(0);
    const stored = await u.store.load(page);
    expect(stored[VIEWERS_COUNTER]?.dc1).toEqual({ p: 1, n: 0 });
    expect(stored.likes?.dc1).toEqual({ p: 1, n: 0 });
  });
  test("counter - a reset queued behind increments of its counter cancels them all, on the commit chain", async () => {
    u = await buildUnits();
    const page = pageIn(0);
    await u.acquire(0);
    let release!: () => void;
    u.store.holdIncrements = new Promise((r) => (release = r));
    const incs = [increment(page, 0, "i1", 2), increment(page, 0, "i2", 3)];
    await u.clock.advance(0);
    // The first batch is in flight; a reset and another increment queue behind it.
    const r = reset(page, 0, "r");
    const later = increment(page, 0, "i3", 4);
    await u.clock.advance(0);
    u.store.holdIncrements = undefined;
    release();
    await u.clock.advance(0);
    await Promise.all(incs);
    expect(await r).toMatchObject({ type: "counter_reset", previous: 5 });
    expect(await later).toMatchObject({ type: "incremented" });
    expect((await u.store.load(page)).likes?.dc1).toEqual({ p: 9, n: 5 });
  });
});
