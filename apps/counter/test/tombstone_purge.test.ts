/**
 * The purge on a counter node: it runs on the commit chain, actors in memory (loaded, or loading
 * while it runs) forget the purged counters, and a change after it starts this DC's entry at the
 * purge floor, so the answer and the stored entry are exact. On the memory store and a manual clock.
 */
import { dcUpdatesSubject } from "@livecount/bus";
import type { IncrementRequest, NodeReply, ResetRequest } from "@livecount/protocol";
import { silentLogger } from "@livecount/runtime";
import { StoreError } from "@livecount/store";
import { Registry } from "prom-client";
import { afterEach, describe, expect, test } from "vitest";
import { CounterMetrics } from "../src/counter_metrics.js";
import { TombstonePurge } from "../src/tombstone_purge.js";
import { COALESCE_MS, buildUnits, pageIn, type Units } from "./units.js";
import { withoutBuckets } from "../../../test/support/records.js";

const PARTITION = 2;
const RECHECK_MS = 1_000;

describe("counter - tombstone purge", () => {
  let u: Units;
  /** Up to when every other DC is known to hold this DC's entries (Infinity: no other DC). */
  let confirmedUntil = Infinity;
  /** Whether this node serves the partition (false: it is another node's, or on its way here). */
  let served = true;
  afterEach(async () => u.close());

  async function settle<T>(work: Promise<T>): Promise<T> {
    await u.clock.advance(0);
    return work;
  }

  function change(page: string, key: string, delta: number): Promise<NodeReply> {
    const request: IncrementRequest = { type: "increment", page, counter: "likes", delta, key };
    return settle(u.registry.run(page, PARTITION, (actor) => u.writer.increment(actor, request)));
  }

  function remove(page: string, key: string): Promise<NodeReply> {
    const request: ResetRequest = { type: "reset", page, counter: "likes", key, tombstone: true };
    return settle(u.registry.run(page, PARTITION, (actor) => u.writer.reset(actor, request)));
  }

  /** Counts the store's purge calls from now on. */
  function countPurgeCalls(): { readonly calls: number } {
    const counted = { calls: 0 };
    const purge = u.store.purgeTombstones.bind(u.store);
    u.store.purgeTombstones = (...args) => {
      counted.calls++;
      return purge(...args);
    };
    return counted;
  }

  /** The store applies every purge call, then the answer is lost. */
  function loseAnswersAfterPurging(): void {
    const applyThenFail = u.store.purgeTombstones.bind(u.store);
    u.store.purgeTombstones = async (...args) => {
      await applyThenFail(...args);
      throw new StoreError("connection lost before the answer");
    };
  }

  async function setUp(): Promise<TombstonePurge> {
    u = await buildUnits();
    confirmedUntil = Infinity;
    served = true;
    await u.acquire(PARTITION);
    return new TombstonePurge({
      nodeId: "me",
      store: u.store,
      clock: u.clock,
      logger: silentLogger,
      metrics: new CounterMetrics(new Registry(), {
        partitionsOwned: () => 1,
        partitionsBootstrapped: () => 1,
      }),
      partitions: () => [PARTITION],
      servingFence: (p) => (served ? u.fences.get(p) : undefined),
      onCommitChain: (step) => u.writer.serialized(step),
      actorOf: (page) => u.registry.find(page),
      actorsIn: (partition) => u.registry.actorsIn(partition),
      confirmedUntil: () => confirmedUntil,
      recheckMs: RECHECK_MS,
      floorRaised: (p, floor) => u.registry.purgeRaised(p, floor),
    });
  }

  test("counter - a purged counter leaves the actor in memory too, and a like after it counts once from the floor", async () => {
    const purge = await setUp();
    const page = pageIn(PARTITION);
    await change(page, "k1", 4);
    await remove(page, "d1");
    // Activity after the delete: p 4 + n 4 = 8, the tombstone's p.
    expect(await u.registry.read(page, PARTITION)).toMatchObject({ "@del:likes": { dc1: { p: 8, n: 0 } } });
    const reply = await settle(purge.request(0));
    expect(reply).toEqual({
      type: "purged",
      node: "me",
      before: u.clock.now(),
      pages: 1,
      counters: 1,
      kept: 0,
      failed: 0,
      waiting: 0,
    });
    expect(Object.keys(await u.registry.read(page, PARTITION))).toEqual(["@viewers"]);
    expect(withoutBuckets(await u.store.load(page))).toEqual({});
    // The actor stayed in memory; the like starts at the floor (4, the purged entry's) and answers exactly.
    expect(await change(page, "k2", 1)).toMatchObject({ type: "incremented", value: 1 });
    expect(withoutBuckets(await u.store.load(page)).likes).toEqual({ dc1: { p: 5, n: 4 } });
    expect((await u.registry.read(page, PARTITION)).likes).toEqual({ dc1: { p: 5, n: 4 } });
    // A delete of the new counter hides it again: the tombstone counts the floor in the activity.
    expect(await remove(page, "d2")).toMatchObject({ type: "counter_reset", previous: 1 });
    expect(withoutBuckets(await u.store.load(page))["@del:likes"]).toEqual({ dc1: { p: 10, n: 0 } });
  });

  test("counter - an actor loading while the purge runs forgets the purged counters once loaded", async () => {
    const purge = await setUp();
    const page = pageIn(PARTITION);
    await change(page, "k1", 2);
    await remove(page, "d1");
    // The page leaves memory; a like loads it again, and the load reads the store before the purge
    // but only arrives after it.
    u.registry.dropPartition(PARTITION, "partition_released");
    await u.acquire(PARTITION);
    const read = u.store.loadExcept.bind(u.store);
    let arrive!: () => void;
    const late = new Promise<void>((resolve) => (arrive = resolve));
    let reads = 0;
    u.store.loadExcept = async (p, prefixes) => {
      const record = await read(p, prefixes);
      reads++;
      await late;
      return record;
    };
    const like = change(page, "k2", 5);
    await u.clock.advance(0);
    expect(reads).toBe(1);
    expect(await settle(purge.request(0))).toMatchObject({ counters: 1 });
    arrive();
    // The like was planned after the actor forgot the counter: it starts at the floor (2).
    expect(await settle(like)).toMatchObject({ value: 5 });
    expect(withoutBuckets(await u.store.load(page)).likes).toEqual({ dc1: { p: 7, n: 2 } });
    expect(await u.registry.read(page, PARTITION)).toEqual({
      "@viewers": {},
      likes: { dc1: { p: 7, n: 2 } },
    });
  });

  test("counter - a like from another DC that reached the actor but not yet the store survives the purge", async () => {
    const purge = await setUp();
    const page = pageIn(PARTITION);
    await change(page, "k1", 2);
    await remove(page, "d1");
    await u.registry.run(page, PARTITION, (actor) => actor.mergeRemote("dc2", { likes: { p: 1, n: 0 } }));
    // The store, without dc2's like yet, finds the counter purgeable; the actor keeps the like.
    expect(await settle(purge.request(0))).toMatchObject({ counters: 1 });
    expect(await u.registry.read(page, PARTITION)).toMatchObject({ likes: { dc2: { p: 1, n: 0 } } });
    await u.clock.advance(COALESCE_MS);
    expect(withoutBuckets(await u.store.load(page))).toEqual({ likes: { dc2: { p: 1, n: 0 } } });
  });

  test("counter - a purge whose answer was lost (the store applied it) is reconciled: memory forgets what the store lost", async () => {
    const purge = await setUp();
    const page = pageIn(PARTITION);
    await change(page, "k1", 3);
    await remove(page, "d1");
    loseAnswersAfterPurging();
    expect(await settle(purge.request(0))).toMatchObject({ counters: 0, failed: 1 });
    expect(withoutBuckets(await u.store.load(page))).toEqual({});
    await u.clock.advance(0);
    await u.writer.drain();
    expect(Object.keys(await u.registry.read(page, PARTITION))).toEqual(["@viewers"]);
    // The floor (3) was read back: the like starts above the purged entry.
    expect(await change(page, "k2", 1)).toMatchObject({ value: 1 });
    expect(withoutBuckets(await u.store.load(page)).likes).toEqual({ dc1: { p: 4, n: 3 } });
  });

  test("counter - a tombstone not yet confirmed held by every DC waits, and goes when anti-entropy confirms it", async () => {
    const purge = await setUp();
    const page = pageIn(PARTITION);
    await change(page, "k1", 2);
    const confirmedBefore = u.clock.now();
    await u.clock.advance(10);
    await remove(page, "d1");
    confirmedUntil = confirmedBefore;
    expect(await settle(purge.request(0))).toMatchObject({ counters: 0, waiting: 1 });
    expect(Object.keys(withoutBuckets(await u.store.load(page)))).toContain("@del:likes");
    // Not looked at again while the confirmation stays where it was.
    const counted = countPurgeCalls();
    await u.clock.advance(RECHECK_MS);
    await u.writer.drain();
    expect(counted.calls).toBe(0);
    expect(Object.keys(withoutBuckets(await u.store.load(page)))).toContain("@del:likes");
    // Every DC is now known to hold it: the next look purges it without anyone asking again.
    confirmedUntil = u.clock.now();
    await u.clock.advance(RECHECK_MS);
    await u.writer.drain();
    await u.clock.advance(0);
    expect(withoutBuckets(await u.store.load(page))).toEqual({});
  });

  test("counter - reconciling after a lost answer leaves alone a tombstone another DC's delete brought that is not written yet", async () => {
    const purge = await setUp();
    const page = pageIn(PARTITION);
    const other = pageIn(PARTITION, 1);
    await change(page, "k1", 5);
    await change(other, "k2", 1);
    await remove(other, "d2");
    // dc2 deletes `likes` of `page`: its entries reach memory, not yet the store (the flush waits).
    await u.registry.run(page, PARTITION, (actor) =>
      actor.mergeRemote("dc2", { likes: { p: 0, n: 5 }, "@del:likes": { p: 10, n: 0 } }),
    );
    loseAnswersAfterPurging();
    await settle(purge.request(0));
    await u.clock.advance(0);
    await u.writer.drain();
    // `other` was purged and forgotten; `page` keeps its entries: hidden, value 0 (not -5).
    expect(Object.keys(await u.registry.read(other, PARTITION))).toEqual(["@viewers"]);
    const held = await u.registry.read(page, PARTITION);
    expect(held.likes).toEqual({ dc1: { p: 5, n: 0 }, dc2: { p: 0, n: 5 } });
    expect(held["@del:likes"]).toEqual({ dc2: { p: 10, n: 0 } });
  });

  test("counter - reconciling leaves alone another DC's unwritten delete of a counter at 0, settled in memory", async () => {
    const purge = await setUp();
    const page = pageIn(PARTITION);
    const other = pageIn(PARTITION, 1);
    await change(page, "k1", 2);
    await change(page, "k2", -2);
    await change(other, "k3", 1);
    await remove(other, "d3");
    // dc2 deletes `likes` of `page` at 0: only its tombstone (2 + 2), not written here yet.
    await u.registry.run(page, PARTITION, (actor) =>
      actor.mergeRemote("dc2", { "@del:likes": { p: 4, n: 0 } }),
    );
    loseAnswersAfterPurging();
    await settle(purge.request(0));
    await u.clock.advance(0);
    await u.writer.drain();
    await u.clock.advance(COALESCE_MS);
    // The delete is kept in memory and reaches the store; this DC's entry too.
    expect(withoutBuckets(await u.store.load(page))).toEqual({
      likes: { dc1: { p: 2, n: 2 } },
      "@del:likes": { dc2: { p: 4, n: 0 } },
    });
  });

  test("counter - a partition that comes to this node after a purge was asked is purged here without asking again", async () => {
    const purge = await setUp();
    const page = pageIn(PARTITION);
    await change(page, "k1", 1);
    await remove(page, "d1");
    served = false;
    expect(await settle(purge.request(0))).toMatchObject({ counters: 0 });
    served = true;
    await u.clock.advance(RECHECK_MS);
    await u.writer.drain();
    await u.clock.advance(0);
    expect(withoutBuckets(await u.store.load(page))).toEqual({});
  });

  test("counter - a retried delete of a settled delete goes out again to this DC's gateways only", async () => {
    await setUp();
    const page = pageIn(PARTITION);
    await change(page, "k1", 2);
    await remove(page, "d1");
    u.published.length = 0;
    u.batches.length = 0;
    // The retry (its owner may have crashed before publishing): another DC may have purged it.
    await remove(page, "d1");
    expect(u.published.filter((p) => p.page === page)).toEqual([]);
    expect(u.batches.map((b) => [b.subject, b.updates.pages[page]])).toEqual([
      [
        dcUpdatesSubject("dc1", PARTITION),
        { likes: { dc1: { p: 2, n: 2 } }, "@del:likes": { dc1: { p: 4, n: 0 } } },
      ],
    ]);
  });

  test("counter - a purge heard from another DC runs once per new time; an older one changes nothing", async () => {
    const purge = await setUp();
    const page = pageIn(PARTITION);
    await change(page, "k1", 1);
    await remove(page, "d1");
    const deletedAt = u.clock.now();
    purge.heard(deletedAt - 1);
    await u.clock.advance(0);
    await u.writer.drain();
    expect(Object.keys(withoutBuckets(await u.store.load(page)))).toContain("likes");
    purge.heard(deletedAt);
    await u.clock.advance(0);
    await u.writer.drain();
    await u.clock.advance(0);
    expect(withoutBuckets(await u.store.load(page))).toEqual({});
    expect(purge.before).toBe(deletedAt);
    // The same time again, or an older one: no sweep at all.
    const counted = countPurgeCalls();
    purge.heard(deletedAt);
    purge.heard(deletedAt - 10);
    await u.clock.advance(0);
    await u.writer.drain();
    expect(counted.calls).toBe(0);
    expect(purge.before).toBe(deletedAt);
  });
});
