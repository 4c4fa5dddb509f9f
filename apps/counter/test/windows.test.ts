import { windowCounterOf, type NodeReply, type NodeRequest } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { silentLogger } from "@livecount/runtime";
import { MemoryStore, type Fence, type Store } from "@livecount/store";
import { Registry } from "prom-client";
import { afterEach, describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { CounterMetrics } from "../src/counter_metrics.js";
import { EmptyPages } from "../src/empty_pages.js";
import { ManualNode } from "./manual_node.js";

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;
/** Minute 28,000,000 (2023): buckets are read by absolute minute. */
const START_MS = 28_000_000 * MINUTE_MS;
const PAGE = "windowed";

/**
 * Time-windowed counters on a counter node with an injected clock: increments land in their
 * minute's bucket, a window sums the buckets of every minute it overlaps, and a day after its minute
 * a bucket is removed from the store.
 */
describe("counter - windows", () => {
  let n: ManualNode | undefined;
  let clock: ManualClock;
  let store: Store;
  let keys = 0;

  afterEach(async () => {
    await n?.stop();
    n = undefined;
  });

  async function start(): Promise<void> {
    n = await ManualNode.start(START_MS, { LIVECOUNT_PARTITIONS: "4" });
    ({ clock, store } = n);
  }

  function ask(request: NodeRequest): Promise<NodeReply> {
    return n!.ask(request);
  }

  async function at(minutes: number, offsetMs: number): Promise<void> {
    await n!.to(START_MS + minutes * MINUTE_MS + offsetMs);
  }

  /** The sweep of a node serving partition 0 of `store` under `fence`. */
  function sweeperOf(fence: Fence, ttlMs: number): { sweeper: EmptyPages; metrics: CounterMetrics } {
    const metrics = new CounterMetrics(new Registry(), {
      partitionsOwned: () => 0,
      partitionsBootstrapped: () => 0,
    });
    const sweeper = new EmptyPages({
      store,
      clock,
      logger: silentLogger,
      metrics,
      ttlMs,
      partitions: () => [0],
      servingFence: () => fence,
    });
    return { sweeper, metrics };
  }

  async function like(delta: number): Promise<void> {
    const reply = await ask({ type: "increment", page: PAGE, counter: "likes", delta, key: `k${++keys}` });
    expect(reply.type).toBe("incremented");
  }

  async function window(seconds: number): Promise<number> {
    const asked = clock.now();
    const reply = await ask({ type: "window", page: PAGE, counter: "likes", seconds });
    if (reply.type !== "window_total") throw new Error(JSON.stringify(reply));
    expect(reply).toMatchObject({ page: PAGE, counter: "likes", seconds });
    expect(reply.ts).toBeGreaterThanOrEqual(asked);
    return reply.value;
  }

  test("counter - a window sums the buckets of every minute it overlaps, across bucket boundaries", async () => {
    await start();
    await at(0, 10_000);
    await like(2);
    await at(0, 40_000);
    await like(3);
    await at(1, 5_000);
    await like(-1);
    await at(1, 10_000);
    // (1:00, 1:10] lies in minute 1 only; (0:40, 1:10] overlaps minutes 0 and 1.
    expect(await window(10)).toBe(-1);
    expect(await window(30)).toBe(4);
    expect(await window(3600)).toBe(4);
    await at(2, 30_000);
    expect(await window(30)).toBe(0);
    expect(await window(60)).toBe(-1);
    expect(await window(91)).toBe(4);
    // A retried increment counts in no bucket twice.
    const retry = { type: "increment", page: PAGE, counter: "likes", delta: 5, key: "same" } as const;
    await ask(retry);
    await ask(retry);
    expect(await window(1)).toBe(5);
    expect(
      await store.loadEntries(PAGE, [{ counter: windowCounterOf("likes", 28_000_002), dc: "dc1" }]),
    ).toEqual([{ p: 5, n: 0 }]);
    // A window never reaches past a day.
    expect(await window(86_400)).toBe(9);
  });

  test("counter - the sweep removes buckets a day after their minute, and the counter stays", async () => {
    clock = new ManualClock(START_MS);
    store = new MemoryStore({ now: () => clock.now() });
    const lease = await store.acquire(0, "counter-1", 10 * DAY_MS);
    const page = "windowed-sweep";
    const fence = lease!;
    await store.increment(
      [
        {
          fence,
          page,
          counter: "likes",
          dc: "dc1",
          delta: 1,
          key: "a",
          payload: "{}",
          also: [{ counter: windowCounterOf("likes", 28_000_000), delta: 1 }],
        },
      ],
      60_000,
    );
    const { sweeper, metrics } = sweeperOf(fence, 60_000);
    await clock.advance(MINUTE_MS + DAY_MS - 1);
    await sweeper.sweepBuckets();
    expect(Object.keys(await store.load(page)).sort()).toEqual([
      windowCounterOf("likes", 28_000_000),
      "likes",
    ]);
    await clock.advance(1);
    await sweeper.sweepBuckets();
    expect(await store.load(page)).toEqual({ likes: { dc1: { p: 1, n: 0 } } });
    expect((await metrics.windowBucketsRemoved.get()).values[0]!.value).toBe(1);
  });

  test("counter - started, the sweep runs a second after every minute boundary, in every DC alike", async () => {
    clock = new ManualClock(START_MS + 30_000);
    store = new MemoryStore({ now: () => clock.now() });
    const lease = await store.acquire(0, "counter-1", 10 * DAY_MS);
    const fence = lease!;
    const bucket = windowCounterOf("likes", 28_000_000);
    await store.write([
      { fence, writes: [{ page: "p", counter: bucket, dc: "dc2", entry: { p: 1, n: 0 } }] },
    ]);
    const { sweeper } = sweeperOf(fence, DAY_MS);
    sweeper.start();
    // The bucket expires at minute 1 + a day; the sweep after that boundary runs 1 s later.
    await clock.advance(MINUTE_MS + DAY_MS - 30_000 + 999);
    expect(Object.keys(await store.load("p"))).toEqual([bucket]);
    await clock.advance(1);
    await clock.advance(0);
    expect(await store.load("p")).toEqual({});
    sweeper.stop();
  });

  test("counter - an actor in memory forgets its noted visitors and peaks when the store removes its page", async () => {
    await start();
    const partition = partitionOf(PAGE, 4);
    const join = (viewer: string, present: boolean) =>
      ask({ type: "presence", gateway: "gw-1", partition, ops: [{ page: PAGE, viewer, present }] });
    await join("v:a", true);
    await join("v:a", false);
    // The page stays in memory (a reader polls it) while it is empty past the TTL and removed.
    for (let i = 0; i < 160; i++) {
      await clock.advance(30_000);
      await ask({ type: "stats", page: PAGE });
    }
    expect(await ask({ type: "node_status" }), "the actor stayed in memory").toMatchObject({ actors: 1 });
    expect(await store.load(PAGE)).toEqual({});
    // The same visitor comes back: the store gets its register and the peak again.
    await join("v:a", true);
    await clock.advance(1000);
    const reply = await ask({ type: "stats", page: PAGE });
    expect(reply).toMatchObject({ type: "page_stats", unique24h: 1, peak1h: 1 });
  });
});
