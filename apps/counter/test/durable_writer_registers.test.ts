/**
 * The durable writer's unique-visitor registers (units wired as the node wires them, manual clock):
 * a flush at LIVECOUNT_FLUSH_MAX_WRITES writes every page's viewers first and the registers in the
 * room left, the rest in the flushes after, within the bound, yesterday's and other DCs' included.
 */
import { VIEWERS_COUNTER } from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import { joinOne, publishesFollowDurableWrites } from "./durable_writes.js";
import { COALESCE_MS, buildUnits, pageIn, type Units } from "./units.js";

describe("counter - durable writer", () => {
  let u: Units;
  afterEach(async () => u.close());

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
    await joinOne(u, quiet, 2);
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
    await joinOne(u, other, 2);
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
});
