import type { IncrementRequest, NodeReply, ResetRequest } from "@livecount/protocol";
import { MemoryStore, OWN_VALUE, type Fence, type IncrementOutcome } from "@livecount/store";
import { describe, expect, test } from "vitest";
import {
  TOO_LARGE,
  planIncrements,
  answerIncrements,
  type PendingIncrement,
} from "../src/increment_batch.js";
import { PageActor, type ActorHost } from "../src/page_actor.js";
import {
  observedResetOp,
  planResets,
  answerResets,
  takeResetRound,
  type PendingReset,
} from "../src/reset_batch.js";
import { VisitorHash } from "../src/visitor_hash.js";

const NOW = 5_000;
const FENCE: Fence = { partition: 3, node: "n1/1", epoch: 7 };
const host: ActorHost = {
  dc: "dc1",
  graceMs: 0,
  visitorHash: new VisitorHash("test-visitor-key-0123"),
  now: () => NOW,
  monotonic: () => NOW,
  markDirty: () => {},
  wakeAt: () => {},
  presenceFloor: () => 0,
  presenceRaised: () => {},
  purgeFloor: () => purgeFloor,
};
/** The partition's purge floor the actors see; 0 but in the tests of a purged partition. */
let purgeFloor = 0;

/** An actor of `page` holding `likes` in this DC (dc1) and `remote` in dc2. */
function actor(page = "p", likes = 0, remote = 0): PageActor {
  const a = new PageActor(host, page, 3, 0);
  const entries = {
    ...(likes > 0 ? { dc1: { p: likes, n: 0 } } : {}),
    ...(remote > 0 ? { dc2: { p: remote, n: 0 } } : {}),
  };
  a.loaded(likes > 0 || remote > 0 ? { likes: entries } : {});
  return a;
}

function pendingIncrement(
  a: PageActor,
  key: string,
  delta = 1,
  counter = "likes",
): PendingIncrement & { replies: NodeReply[] } {
  const replies: NodeReply[] = [];
  const request: IncrementRequest = { type: "increment", page: a.page, counter, delta, key };
  return { actor: a, request, resolve: (r) => replies.push(r), replies };
}

const OWNER_CHANGED = "the page's owner changed; retry";
/** The wire message of idempotency_conflict. */
const CONFLICT = "idempotency key was used for a different request";

const fenceOf = (partition: number): Fence | undefined => (partition === 3 ? FENCE : undefined);

describe("counter - group commit of increments", () => {
  test("counter - one op per distinct change, a repeat shares it; each op's kept answer leaves this DC's entry to the store", () => {
    const a = actor("p", 10, 4);
    const batch = [
      pendingIncrement(a, "k1", 2),
      pendingIncrement(a, "k1", 2),
      pendingIncrement(a, "k1", 5),
      pendingIncrement(a, "k2", 3),
    ];
    const plan = planIncrements(batch, "dc1", NOW, fenceOf);
    // base: the other DCs' entries (dc2's 4); own: written by the store after the op; value: the
    // estimate owners of the previous release read (14 + delta).
    const kept = (value: number): string =>
      `{"value":${value},"base":4,"own":${OWN_VALUE},"updatedAt":${NOW}}`;
    expect(plan.ops.map((o) => [o.key, o.delta, o.payload])).toEqual([
      ["k1", 2, kept(16)],
      ["k1", 5, kept(19)],
      ["k2", 3, kept(17)],
    ]);
    expect(plan.ops.every((o) => o.fence === FENCE && o.dc === "dc1")).toBe(true);
    expect(plan.refused).toEqual([]);
    // Planning reads the actor without creating counters: a refused increment leaves no trace.
    planIncrements([pendingIncrement(a, "k9", 1, "shares")], "dc1", NOW, fenceOf);
    expect(a.snapshot()).not.toHaveProperty("shares");
  });

  test("counter - an increment whose partition is not held or whose actor closed is refused as unavailable", () => {
    const closed = actor("c");
    closed.close();
    const foreign = new PageActor(host, "f", 4, 0);
    foreign.loaded({});
    const plan = planIncrements(
      [pendingIncrement(closed, "k"), pendingIncrement(foreign, "k")],
      "dc1",
      NOW,
      fenceOf,
    );
    expect(plan.ops).toEqual([]);
    expect(plan.refused.map((r) => r.reply)).toMatchObject([
      { code: "unavailable" },
      { code: "unavailable" },
    ]);
  });

  test("counter - an increment past 2^53 - 1 goes to the store, which checks it after the key: too_large answers invalid_body and leaves the actor be", () => {
    const MAX = Number.MAX_SAFE_INTEGER;
    const a = actor("p", MAX - 10);
    // Past the limit as the owner sees it, yet maybe a retry of a first try the store applied: only
    // the store, reading the key first, can tell (a refusal here would answer a retry with 400).
    const plan = planIncrements(
      [pendingIncrement(a, "fits", 6), pendingIncrement(a, "after", 6)],
      "dc1",
      NOW,
      fenceOf,
    );
    expect(plan.refused).toEqual([]);
    expect(plan.ops.map((o) => o.key)).toEqual(["fits", "after"]);
    const settled = answerIncrements(plan, [
      { kind: "applied", entry: { p: MAX - 4, n: 0 }, also: [{ p: 6, n: 0 }] },
      { kind: "too_large" },
    ]);
    expect(settled.answers.map((x) => [x.pending.request.key, x.reply])).toEqual([
      [
        "fits",
        {
          type: "incremented",
          page: "p",
          counter: "likes",
          value: MAX - 4,
          updatedAt: NOW,
          duplicate: false,
        },
      ],
      ["after", { type: "error", code: "invalid_body", message: TOO_LARGE }],
    ]);
    expect(TOO_LARGE).toBe(`the change would take the counter's entry in this data center past ${MAX}`);
    expect(settled.outcomes).toEqual(["applied", "too_large"]);
    expect(settled.lost.size).toBe(0);
    expect(a.ownEntry("likes")).toEqual({ p: MAX - 4, n: 0 });
  });

  test("counter - a change to a new counter of a page that holds LIVECOUNT_MAX_COUNTERS_PER_PAGE counters is refused; its own counters keep counting", () => {
    const a = actor("p", 3);
    a.applied("hearts", { p: 1, n: 0 });
    // Presence and tombstones are not counters the page holds.
    a.applied("@del:gone", { p: 1, n: 0 });
    expect(a.counterCount).toBe(2);
    const plan = planIncrements(
      [
        pendingIncrement(a, "k1", 1, "claps"),
        pendingIncrement(a, "k2", 1, "stars"),
        pendingIncrement(a, "k3", 1, "likes"),
        pendingIncrement(a, "k4", 2, "claps"),
      ],
      "dc1",
      NOW,
      fenceOf,
      3,
    );
    expect(plan.ops.map((o) => [o.key, o.counter])).toEqual([
      ["k1", "claps"],
      ["k3", "likes"],
      ["k4", "claps"],
    ]);
    expect(plan.refused.map((r) => [r.pending.request.key, r.reply])).toEqual([
      [
        "k2",
        {
          type: "error",
          code: "invalid_counter",
          message: "the page holds 3 counters already (LIVECOUNT_MAX_COUNTERS_PER_PAGE)",
        },
      ],
    ]);
    // Another page has room of its own.
    expect(
      planIncrements([pendingIncrement(actor("q"), "k", 1, "stars")], "dc1", NOW, fenceOf, 3).ops,
    ).toHaveLength(1);
  });

  test("counter - outcomes become replies: applied, duplicate with the first answer, conflict, stale; repeats copy theirs", () => {
    const a = actor("p", 10);
    const b = actor("q");
    const batch = [
      pendingIncrement(a, "applied", 1),
      pendingIncrement(a, "applied", 1),
      pendingIncrement(b, "dup", 4),
      pendingIncrement(b, "conflict", 1),
      pendingIncrement(b, "stale", 1),
    ];
    const plan = planIncrements(batch, "dc1", NOW, fenceOf);
    const outcomes: IncrementOutcome[] = [
      { kind: "applied", entry: { p: 11, n: 0 } },
      { kind: "duplicate", payload: JSON.stringify({ value: 42, updatedAt: 7 }) },
      { kind: "conflict" },
      { kind: "stale" },
    ];
    const settled = answerIncrements(plan, outcomes);
    for (const { pending, reply } of settled.answers) pending.resolve(reply);
    expect(batch.map((p) => p.replies[0])).toMatchObject([
      { type: "incremented", value: 11, updatedAt: NOW, duplicate: false },
      { type: "incremented", value: 11, updatedAt: NOW, duplicate: true },
      { type: "incremented", value: 42, updatedAt: 7, duplicate: true },
      { type: "error", code: "idempotency_conflict" },
      { type: "error", code: "unavailable" },
    ]);
    expect(a.ownEntry("likes")).toEqual({ p: 11, n: 0 });
    // q holds no entry of likes here (the counter was purged since): nothing to publish again.
    expect(settled.durable.map((u) => [u.page, u.dc])).toEqual([["p", "dc1"]]);
    expect(settled.lost).toEqual(new Set([3]));
    expect(settled.outcomes).toEqual(["applied", "duplicate", "conflict", "stale"]);
  });

  test("counter - a duplicate whose stored answer is unreadable answers internal instead of breaking the batch", () => {
    const a = actor();
    const plan = planIncrements([pendingIncrement(a, "k")], "dc1", NOW, fenceOf);
    const settled = answerIncrements(plan, [{ kind: "duplicate", payload: "{not json" }]);
    expect(settled.answers[0]?.reply).toMatchObject({ type: "error", code: "internal" });
    // A stored answer missing a field is as unreadable.
    const partial = answerIncrements(plan, [{ kind: "duplicate", payload: JSON.stringify({ value: 3 }) }]);
    expect(partial.answers[0]?.reply).toMatchObject({ type: "error", code: "internal" });
  });

  test("counter - answers are the other DCs' entries plus this DC's entry as the store returns it: a retried key earlier in the batch does not inflate later answers", () => {
    // dc1 holds 5 from an earlier batch whose answer was lost (k1); dc2 holds 4.
    const a = actor("p", 5, 4);
    const batch = [
      pendingIncrement(a, "k1", 5),
      pendingIncrement(a, "k2", 5),
      pendingIncrement(a, "k3", 1, "stars"),
    ];
    const plan = planIncrements(batch, "dc1", NOW, fenceOf);
    const settled = answerIncrements(plan, [
      { kind: "duplicate", payload: `{"base":4,"own":5,"updatedAt":1000}` },
      { kind: "applied", entry: { p: 10, n: 0 } },
      { kind: "applied", entry: { p: 1, n: 0 } },
    ]);
    expect(settled.answers.map((x) => x.reply)).toMatchObject([
      { type: "incremented", counter: "likes", value: 9, updatedAt: 1000, duplicate: true },
      { type: "incremented", counter: "likes", value: 14, updatedAt: NOW, duplicate: false },
      { type: "incremented", counter: "stars", value: 1, updatedAt: NOW, duplicate: false },
    ]);
    // A retry of k2 gets the answer the store kept (its {own} filled in), equal to the first.
    const kept = plan.ops[1]!.payload.replaceAll(OWN_VALUE, "10");
    const retry = planIncrements([pendingIncrement(a, "k2", 5)], "dc1", NOW + 1, fenceOf);
    const again = answerIncrements(retry, [{ kind: "duplicate", payload: kept }]);
    expect(again.answers[0]?.reply).toMatchObject({ value: 14, updatedAt: NOW, duplicate: true });
  });

  test("counter - decrements: base and answers are p - n of every entry", () => {
    const a = new PageActor(host, "p", 3, 0);
    a.loaded({ likes: { dc1: { p: 10, n: 3 }, dc2: { p: 4, n: 1 } } });
    const plan = planIncrements([pendingIncrement(a, "d", -2)], "dc1", NOW, fenceOf);
    expect(plan.ops[0]!.payload).toBe(`{"value":8,"base":3,"own":${OWN_VALUE},"updatedAt":${NOW}}`);
    const settled = answerIncrements(plan, [{ kind: "applied", entry: { p: 10, n: 5 } }]);
    expect(settled.answers[0]?.reply).toMatchObject({ value: 8, duplicate: false });
  });

  test("counter - the kept answer is readable by owners of the previous release (value, updatedAt), and here base + own wins over value", () => {
    const a = actor("p", 5, 4);
    const plan = planIncrements([pendingIncrement(a, "k", 5)], "dc1", NOW, fenceOf);
    const stored = plan.ops[0]!.payload.replaceAll(OWN_VALUE, "7");
    // What the previous release parses: its own fields only.
    expect(JSON.parse(stored)).toMatchObject({ value: 14, updatedAt: NOW });
    const again = answerIncrements(plan, [{ kind: "duplicate", payload: stored }]);
    expect(again.answers[0]?.reply).toMatchObject({ value: 11, updatedAt: NOW, duplicate: true });
  });

  test("counter - a key answered before answers were completed by the store ({value, updatedAt}) is still read", () => {
    const plan = planIncrements([pendingIncrement(actor(), "old")], "dc1", NOW, fenceOf);
    const settled = answerIncrements(plan, [
      { kind: "duplicate", payload: JSON.stringify({ value: 42, updatedAt: 7 }) },
    ]);
    expect(settled.answers[0]?.reply).toMatchObject({ value: 42, updatedAt: 7, duplicate: true });
  });

  test("counter - a repeat of a request whose op failed gets the same failure, and every request one answer", () => {
    const a = actor("p", 10);
    const batch = [pendingIncrement(a, "k", 1), pendingIncrement(a, "k", 1), pendingIncrement(a, "other", 1)];
    const plan = planIncrements(batch, "dc1", NOW, fenceOf);
    const settled = answerIncrements(plan, [
      { kind: "conflict" },
      { kind: "applied", entry: { p: 11, n: 0 } },
    ]);
    expect(settled.answers).toHaveLength(batch.length);
    expect(settled.answers.map((x) => [x.pending.request.key, x.reply])).toEqual([
      ["k", { type: "error", code: "idempotency_conflict", message: CONFLICT }],
      ["other", expect.objectContaining({ type: "incremented", duplicate: false })],
      ["k", { type: "error", code: "idempotency_conflict", message: CONFLICT }],
    ]);
    expect(settled.outcomes).toEqual(["conflict", "applied"]);
    expect(a.ownEntry("likes")).toEqual({ p: 11, n: 0 });
  });

  test("counter - an op the store gave no outcome for counts as stale: unavailable, and its partition lost", () => {
    const a = actor("p", 10);
    const plan = planIncrements([pendingIncrement(a, "k")], "dc1", NOW, fenceOf);
    const settled = answerIncrements(plan, []);
    expect(settled.answers.map((x) => x.reply)).toEqual([
      { type: "error", code: "unavailable", message: "the page's owner changed; retry" },
    ]);
    expect(settled.outcomes).toEqual(["stale"]);
    expect(settled.lost).toEqual(new Set([3]));
    expect(settled.durable).toEqual([]);
  });
});

function pendingReset(
  a: PageActor,
  key: string,
  tombstone = false,
  counter = "likes",
): PendingReset & { replies: NodeReply[] } {
  const replies: NodeReply[] = [];
  const request: ResetRequest = { type: "reset", page: a.page, counter, key, tombstone };
  return { actor: a, request, resolve: (r) => replies.push(r), replies };
}

describe("counter - observed resets", () => {
  test("counter - a round holds at most one reset per counter of a page; the rest wait", () => {
    const a = actor("p");
    const b = actor("q");
    const queue = [
      pendingReset(a, "1"),
      pendingReset(a, "2"),
      pendingReset(b, "3"),
      pendingReset(a, "4", false, "hearts"),
    ];
    const { round, later } = takeResetRound(queue);
    expect(round.map((r) => r.request.key)).toEqual(["1", "3", "4"]);
    expect(later.map((r) => r.request.key)).toEqual(["2"]);
  });

  test("counter - a reset cancels the observed value; a delete also raises its tombstone to the activity after it", () => {
    const a = actor("p", 9);
    const { op, previous } = observedResetOp(a, pendingReset(a, "r").request, FENCE, "dc1", NOW);
    expect([previous, op.delta, op.fingerprint, op.also]).toEqual([9, -9, "reset:likes", undefined]);
    const del = observedResetOp(a, pendingReset(a, "d", true).request, FENCE, "dc1", NOW);
    // Activity before is 9 (p); the reset adds 9 to n: 18 after it.
    expect([del.op.fingerprint, del.op.also]).toEqual([
      "delete:likes",
      [{ counter: "@del:likes", delta: 18 }],
    ]);
  });

  test("counter - after a purge, a counter with no entry here starts at the purge floor, and a delete counts it in the activity", () => {
    purgeFloor = 50;
    try {
      // dc2 holds 4 of `likes`; this DC none (purged, or never written).
      const a = actor("p", 0, 4);
      const [inc] = planIncrements([pendingIncrement(a, "k1", 2)], "dc1", NOW, fenceOf).ops;
      expect(inc!.startAt).toBe(50);
      const del = observedResetOp(a, pendingReset(a, "d", true).request, FENCE, "dc1", NOW);
      // The store starts dc1's entry at {50, 50}, then the reset adds 4 to n: 4 + 100 + 4 after it.
      expect([del.op.startAt, del.op.delta, del.op.also]).toEqual([
        50,
        -4,
        [{ counter: "@del:likes", delta: 108 }],
      ]);
      // This DC has an entry: the store holds it too, no start needed.
      const held = actor("p", 3, 4);
      expect(
        planIncrements([pendingIncrement(held, "k2", 1)], "dc1", NOW, fenceOf).ops[0]!.startAt,
      ).toBeUndefined();
    } finally {
      purgeFloor = 0;
    }
  });

  test("counter - reset outcomes become replies and durable entries, the tombstone with its counter", () => {
    const a = actor("p", 5);
    const round = [pendingReset(a, "d", true), pendingReset(actor("q"), "x")];
    const plan = planResets(round, "dc1", NOW, fenceOf);
    const settled = answerResets(plan, [
      { kind: "applied", entry: { p: 5, n: 5 }, also: [{ p: 10, n: 0 }] },
      { kind: "stale" },
    ]);
    expect(settled.answers.map((x) => x.reply)).toMatchObject([
      { type: "counter_reset", previous: 5, duplicate: false },
      { type: "error", code: "unavailable" },
    ]);
    expect(settled.durable).toEqual([
      {
        page: "p",
        partition: 3,
        dc: "dc1",
        counters: new Map(Object.entries({ likes: { p: 5, n: 5 }, "@del:likes": { p: 10, n: 0 } })),
      },
    ]);
    expect(settled.lost).toEqual(new Set([3]));
    expect(settled.outcomes).toEqual([
      { kind: "delete", outcome: "applied" },
      { kind: "reset", outcome: "stale" },
    ]);
  });

  test("counter - a reset stores the value it observed and when, to answer a retry with them", () => {
    const a = actor("p", 9);
    const { op } = observedResetOp(a, pendingReset(a, "r").request, FENCE, "dc1", NOW);
    expect(op).toMatchObject({ fence: FENCE, page: "p", counter: "likes", dc: "dc1", key: "r" });
    expect(JSON.parse(op.payload)).toEqual({ previous: 9, updatedAt: NOW });
  });

  test("counter - a second delete raises the tombstone only by what changed since the first", () => {
    const a = actor("p", 9);
    // The first delete: activity 9 + 9 = 18 after its reset, recorded in the tombstone.
    a.applied("likes", { p: 9, n: 9 });
    a.applied("@del:likes", { p: 18, n: 0 });
    // Then 4 more likes: activity 22; a delete now adds 4 to n: 26.
    a.applied("likes", { p: 13, n: 9 });
    const del = observedResetOp(a, pendingReset(a, "d2", true).request, FENCE, "dc1", NOW);
    expect(del.op.delta).toBe(-4);
    expect(del.op.also).toEqual([{ counter: "@del:likes", delta: 8 }]);
  });

  test("counter - a reset whose partition is not held or whose actor closed is refused as unavailable", () => {
    const closed = actor("c");
    closed.close();
    const foreign = new PageActor(host, "f", 4, 0);
    foreign.loaded({});
    const plan = planResets([pendingReset(closed, "k"), pendingReset(foreign, "k")], "dc1", NOW, fenceOf);
    expect(plan.sent).toEqual([]);
    expect(plan.refused.map((r) => [r.pending.actor.page, r.reply])).toEqual([
      ["c", { type: "error", code: "unavailable", message: OWNER_CHANGED }],
      ["f", { type: "error", code: "unavailable", message: OWNER_CHANGED }],
    ]);
  });

  test("counter - a reset or delete whose change no op can carry is refused before the store; one the store finds too_large answers the same", async () => {
    const MAX = Number.MAX_SAFE_INTEGER;
    // Across DCs: resetting a value made mostly in dc2 cancels more than a safe integer.
    const wide = actor("w", 10, MAX - 5);
    // A delete's tombstone counts every change (p + n + |value|): past the limit with p past 2^52.
    const busy = new PageActor(host, "b", 3, 0);
    busy.loaded({ likes: { dc1: { p: 2 ** 52 + 10, n: 2 ** 52 } } });
    const fine = actor("f", 7);
    const plan = planResets(
      [pendingReset(wide, "k1"), pendingReset(busy, "k2", true), pendingReset(fine, "k3", true)],
      "dc1",
      NOW,
      fenceOf,
    );
    expect(plan.refused.map((r) => [r.pending.actor.page, r.reply])).toEqual([
      ["w", { type: "error", code: "invalid_body", message: TOO_LARGE }],
      ["b", { type: "error", code: "invalid_body", message: TOO_LARGE }],
    ]);
    // What is sent, a real store takes: the round's other pages are not failed with it.
    const store = new MemoryStore({ now: () => NOW });
    const fence = (await store.acquire(3, "node-a", 60_000))!;
    const ops = plan.sent.map((s) => ({ ...s.op, fence }));
    expect((await store.increment(ops, 60_000)).map((o) => o.kind)).toEqual(["applied"]);
    // A change the store finds past this DC's entry: the same answer, and the actor left be.
    const near = actor("n", 3);
    near.applied("likes", { p: 3, n: MAX - 1 });
    const nearPlan = planResets([pendingReset(near, "k4")], "dc1", NOW, fenceOf);
    const settled = answerResets(nearPlan, [{ kind: "too_large" }]);
    expect(settled.answers.map((x) => x.reply)).toEqual([
      { type: "error", code: "invalid_body", message: TOO_LARGE },
    ]);
    expect(settled.outcomes).toEqual([{ kind: "reset", outcome: "too_large" }]);
    expect(settled.durable).toEqual([]);
    expect(near.ownEntry("likes")).toEqual({ p: 3, n: MAX - 1 });
  });

  test("counter - a retried reset or delete answers what the first try stored and republishes the entries it made; a settled delete's to this DC only", () => {
    // p: likes 5 here and 2 in dc2, deleted here (dc1's entry cancels both).
    const a = actor("p", 5, 2);
    a.applied("likes", { p: 5, n: 12 });
    a.applied("@del:likes", { p: 19, n: 0 });
    const b = actor("q", 3);
    // s and t: written here only and deleted: settled, and maybe purged in another DC already, where
    // a copy would come back: what a retry publishes again goes to this DC's gateways only.
    const settledActor = (page: string): PageActor => {
      const x = actor(page, 4);
      x.applied("likes", { p: 4, n: 4 });
      x.applied("@del:likes", { p: 8, n: 0 });
      return x;
    };
    const round = [
      pendingReset(a, "d", true),
      pendingReset(b, "r"),
      pendingReset(settledActor("s"), "d", true),
      pendingReset(settledActor("t"), "r"),
    ];
    const plan = planResets(round, "dc1", NOW, fenceOf);
    const settled = answerResets(plan, [
      { kind: "duplicate", payload: JSON.stringify({ previous: 7, updatedAt: 7 }) },
      { kind: "duplicate", payload: JSON.stringify({ previous: 3, updatedAt: 8 }) },
      { kind: "duplicate", payload: JSON.stringify({ previous: 4, updatedAt: 9 }) },
      { kind: "duplicate", payload: JSON.stringify({ previous: 0, updatedAt: 9 }) },
    ]);
    expect(settled.answers.map((x) => x.reply)).toMatchObject([
      { page: "p", previous: 7, duplicate: true },
      { page: "q", previous: 3, duplicate: true },
      { page: "s", previous: 4, duplicate: true },
      { page: "t", previous: 0, duplicate: true },
    ]);
    expect(settled.durable).toEqual([
      {
        page: "p",
        partition: 3,
        dc: "dc1",
        counters: new Map(Object.entries({ likes: { p: 5, n: 12 }, "@del:likes": { p: 19, n: 0 } })),
      },
      { page: "q", partition: 3, dc: "dc1", counters: new Map([["likes", { p: 3, n: 0 }]]) },
      {
        page: "s",
        partition: 3,
        dc: "dc1",
        counters: new Map(Object.entries({ likes: { p: 4, n: 4 }, "@del:likes": { p: 8, n: 0 } })),
        local: true,
      },
      { page: "t", partition: 3, dc: "dc1", counters: new Map([["likes", { p: 4, n: 4 }]]), local: true },
    ]);
    expect(settled.outcomes.map((o) => o.outcome)).toEqual([
      "duplicate",
      "duplicate",
      "duplicate",
      "duplicate",
    ]);
  });

  test("counter - a retried reset whose stored answer is unreadable answers internal", () => {
    const a = actor("p", 5);
    const plan = planResets([pendingReset(a, "r"), pendingReset(actor("q"), "s")], "dc1", NOW, fenceOf);
    const settled = answerResets(plan, [
      { kind: "duplicate", payload: "{not json" },
      { kind: "duplicate", payload: JSON.stringify({ previous: 5 }) },
    ]);
    expect(settled.answers.map((x) => x.reply)).toMatchObject([
      { type: "error", code: "internal" },
      { type: "error", code: "internal" },
    ]);
  });

  test("counter - a reset conflicting with its key's first use, or with no outcome from the store, is refused", () => {
    const plan = planResets(
      [pendingReset(actor("p", 5), "r"), pendingReset(actor("q"), "s")],
      "dc1",
      NOW,
      fenceOf,
    );
    const settled = answerResets(plan, [{ kind: "conflict" }]);
    expect(settled.answers.map((x) => x.reply)).toEqual([
      { type: "error", code: "idempotency_conflict", message: CONFLICT },
      { type: "error", code: "unavailable", message: OWNER_CHANGED },
    ]);
    expect(settled.outcomes).toEqual([
      { kind: "reset", outcome: "conflict" },
      { kind: "reset", outcome: "stale" },
    ]);
    expect(settled.lost).toEqual(new Set([3]));
    expect(settled.durable).toEqual([]);
  });
});
