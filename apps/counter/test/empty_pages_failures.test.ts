/**
 * What the empty-page and window-bucket sweeps (empty_pages.ts) say when the store fails them: one
 * warning per sweep with how many partitions failed, however many there are, and nothing for a
 * partition that moved to another node (a stale fence).
 */
import { MemoryStore, StaleFenceError, type Fence } from "@livecount/store";
import { Registry } from "prom-client";
import { describe, expect, test } from "vitest";
import { WARN, logLines } from "../../../packages/cluster/test/log_lines.js";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { CounterMetrics } from "../src/counter_metrics.js";
import { EmptyPages } from "../src/empty_pages.js";

const PARTITIONS = 256;

/** A store down for every call of both sweeps, but for partitions in `moved`, whose fence is stale. */
class DownStore extends MemoryStore {
  constructor(readonly moved: ReadonlySet<number>) {
    super();
  }

  #fail(fence: Fence): never {
    if (this.moved.has(fence.partition)) throw new StaleFenceError(fence);
    throw new Error("connect ECONNREFUSED 127.0.0.1:6379");
  }

  override async removeEmptyPages(fence: Fence): Promise<string[]> {
    this.#fail(fence);
  }

  override async removeExpiredBuckets(fence: Fence): Promise<number> {
    this.#fail(fence);
  }
}

function sweeperOn(store: MemoryStore) {
  const { logger, lines } = logLines();
  const sweeper = new EmptyPages({
    store,
    clock: new ManualClock(),
    logger,
    metrics: new CounterMetrics(new Registry(), {
      partitionsOwned: () => 0,
      partitionsBootstrapped: () => 0,
    }),
    ttlMs: 60_000,
    partitions: () => Array.from({ length: PARTITIONS }, (_, p) => p),
    servingFence: (partition): Fence => ({ partition, node: "counter-1", epoch: 1 }),
  });
  return { sweeper, warnings: () => lines.filter((l) => l.level === WARN) };
}

describe("counter - sweeps of a failing store", () => {
  test("counter - a store down for every partition is one warning per sweep, with the count and the first error", async () => {
    const { sweeper, warnings } = sweeperOn(new DownStore(new Set([3, 4])));
    expect(await sweeper.sweep()).toBe(0);
    expect(await sweeper.sweepBuckets()).toBe(0);
    expect(warnings()).toEqual([
      expect.objectContaining({
        msg: "empty pages not removed; the next sweep tries again",
        partitions: PARTITIONS - 2,
        err: expect.objectContaining({ message: "connect ECONNREFUSED 127.0.0.1:6379" }),
      }),
      expect.objectContaining({
        msg: "window buckets not removed; the next sweep tries again",
        partitions: PARTITIONS - 2,
      }),
    ]);
  });

  test("counter - partitions that moved to another node (stale fences) are no failure", async () => {
    const { sweeper, warnings } = sweeperOn(
      new DownStore(new Set(Array.from({ length: PARTITIONS }, (_, p) => p))),
    );
    await sweeper.sweep();
    await sweeper.sweepBuckets();
    expect(warnings()).toEqual([]);
  });
});
