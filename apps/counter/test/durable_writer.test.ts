/**
 * The durable writer's flushes of presence (units wired as the node wires them, in-memory store,
 * manual clock): nothing is published before it is written, failed writes are retried, a flush
 * keeps within LIVECOUNT_FLUSH_MAX_WRITES, and draining writes every dirty page. Unique-visitor
 * registers at the bound are in durable_writer_registers.test.ts; increments, resets and
 * anti-entropy merges in durable_writer_commits.test.ts, with a drain of queued increments.
 */
import { VIEWERS_COUNTER } from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import { joinOne, publishesFollowDurableWrites } from "./durable_writes.js";
import { COALESCE_MS, buildUnits, pageIn, type Units } from "./units.js";

describe("counter - durable writer", () => {
  let u: Units;
  afterEach(async () => u.close());

  /** Page i (in partition i + 1) gets a viewer, its partition held here: one partition per page. */
  async function joinEach(pages: readonly string[]): Promise<void> {
    for (const [i, page] of pages.entries()) {
      await u.acquire(i + 1);
      await joinOne(u, page, i + 1);
    }
  }

  test("counter - presence is published only after its write; failed writes publish nothing and are retried", async () => {
    u = await buildUnits();
    const page = pageIn(1);
    await u.acquire(1);
    u.store.failWrites = 2;
    await joinOne(u, page);
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
    await joinOne(u, page);
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
    await joinOne(u, a);
    await joinOne(u, other, 2);
    await joinOne(u, b);
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
    await joinOne(u, pageIn(1, 0));
    u.store.failWrites = 100;
    await u.writer.drain().catch(() => {});
    expect(u.writer.dirtyCount).toBe(1);
    expect(u.timeline.filter((e) => e === "write:failed").length).toBeLessThanOrEqual(2);
    u.store.failWrites = 0;
  });

  test("counter - a flush under its bound takes every dirty page in one write", async () => {
    const pages = [pageIn(1, 0), pageIn(1, 1), pageIn(1, 2)];
    u = await buildUnits();
    await u.acquire(1);
    for (const page of pages) await joinOne(u, page);
    const writes = pages.reduce((n, page) => n + u.registry.find(page)!.unwrittenCount, 0);
    await u.clock.advance(0);
    expect(u.timeline[1]).toBe(`write:done:${pages.join(",")}`);
    expect(u.store.entriesWritten).toBe(writes);
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
});
