/**
 * What the durable writer commits on request (units wired as the node wires them, manual clock):
 * increments and resets acknowledged only once durable and published, answered unavailable when
 * the store fails, retries of a lost answer, a drain of queued increments, and anti-entropy merges
 * written before they are published and never too many at once.
 */
import {
  VIEWERS_COUNTER,
  type IncrementRequest,
  type NodeReply,
  type ResetRequest,
} from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import { dcUpdatesSubject } from "@livecount/bus";
import type { PageRecord } from "@livecount/store";
import { publishesFollowDurableWrites } from "./durable_writes.js";
import { DC, buildUnits, pageIn, type Units } from "./units.js";

describe("counter - durable writer", () => {
  let u: Units;
  afterEach(async () => u.close());

  function increment(page: string, partition: number, key: string, delta = 1): Promise<NodeReply> {
    const request: IncrementRequest = { type: "increment", page, counter: "likes", delta, key };
    return u.registry.run(page, partition, (actor) => u.writer.increment(actor, request));
  }

  function reset(page: string, partition: number, key: string, tombstone = false): Promise<NodeReply> {
    const request: ResetRequest = { type: "reset", page, counter: "likes", key, tombstone };
    return u.registry.run(page, partition, (actor) => u.writer.reset(actor, request));
  }

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
    expect(advanced.map((pages) => pages?.size)).toEqual([1, 1, 1, 1]);
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
    expect(Object.fromEntries(advanced!)).toEqual({
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
    // Refused (null), not "nothing advanced": a transfer with a gap teaches no bootstrap.
    expect(refused).toBeNull();
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
