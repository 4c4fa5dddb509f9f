import { VIEWERS_COUNTER } from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import { COALESCE_MS, buildUnits, pageIn, type Units } from "./units.js";

/**
 * After the store restarted, every page in memory writes its entries again (ActorRegistry.rewriteOwn):
 * with 100,000 pages, twenty flushes at their bound. Those rewrites change no count, so a change
 * made meanwhile (a viewer's join) goes in the next flush, ahead of them, and is published then.
 */
describe("counter - entries written again after a store restart", () => {
  let u: Units;
  afterEach(async () => u.close());

  /** Page i is in partition i + 1, held here: one partition per page. */
  const pages = [pageIn(1), pageIn(2), pageIn(3), pageIn(4)];

  function join(page: string, partition: number, viewer: string): Promise<unknown> {
    return u.intake.batch({
      type: "presence",
      gateway: "gw",
      partition,
      ops: [{ page, viewer, present: true }],
    });
  }

  /** Flushes until nothing waits, one window at a time, and lets a window pass: the next change flushes at once. */
  async function flushAll(): Promise<void> {
    await u.clock.advance(0);
    while (u.writer.dirtyCount > 0) await u.clock.advance(COALESCE_MS);
    await u.clock.advance(COALESCE_MS);
  }

  test("counter - a change made while pages write their entries again goes in the next flush, ahead of them; the rewrites add nothing to the lag", async () => {
    // A join writes five entries before its register: one page fills a bound of 3 on its own.
    u = await buildUnits({ flushMaxWrites: 3 });
    for (const [i, page] of pages.entries()) {
      await u.acquire(i + 1);
      await join(page, i + 1, "v:1");
    }
    await flushAll();

    // The store came back from a restart: every page writes its entries again.
    u.registry.rewriteOwn();
    expect(u.writer.dirtyCount).toBe(pages.length);
    expect(u.writer.flushLagMs).toBe(0);
    // A viewer joins the page whose partition is last in line.
    const last = pages.length - 1;
    await join(pages[last]!, last + 1, "v:2");
    const from = u.timeline.length;
    await u.clock.advance(0);
    expect(u.timeline.slice(from)).toEqual([
      "write:start",
      `write:done:${pages[last]}`,
      `publish:${pages[last]}`,
    ]);
    expect(u.published.at(-1)?.counters[VIEWERS_COUNTER]).toEqual({ p: 2, n: 0 });

    // Then the rewrites, one partition a flush at this bound, oldest first.
    for (const page of pages.slice(0, last)) {
      const at = u.timeline.length;
      await u.clock.advance(COALESCE_MS);
      expect(u.timeline.slice(at, at + 2)).toEqual(["write:start", `write:done:${page}`]);
    }
    await flushAll();
    for (const [i, page] of pages.entries()) {
      const own = (await u.store.load(page))[VIEWERS_COUNTER]?.dc1;
      expect(own!.p - own!.n).toBe(i === last ? 2 : 1);
    }
  });

  test("counter - a change to a page of a partition that was only rewriting takes the whole partition along", async () => {
    u = await buildUnits({ flushMaxWrites: 3 });
    const [a, b] = [pageIn(2, 0), pageIn(2, 1)];
    await u.acquire(1);
    await u.acquire(2);
    await join(pages[0]!, 1, "v:1");
    await join(a, 2, "v:1");
    await join(b, 2, "v:1");
    await flushAll();
    u.registry.rewriteOwn();
    await join(b, 2, "v:2");
    const from = u.timeline.length;
    await u.clock.advance(0);
    // Partition 2 goes whole, the page that changed and the one only rewriting, in one script.
    expect(u.timeline.slice(from, from + 2)).toEqual(["write:start", `write:done:${a},${b}`]);
    await u.clock.advance(COALESCE_MS);
    expect(u.timeline.slice(from + 3, from + 5)).toEqual(["write:start", `write:done:${pages[0]}`]);
  });
});
