/**
 * Observed resets and deletes (reset_batch.ts), planned and answered on page actors without a
 * store: one reset per counter a round, the value it observed cancelled and a delete's tombstone
 * raised, refusals before the store, retries answered with what the first try stored.
 */
import type { NodeReply, ResetRequest } from "@livecount/protocol";
import { MemoryStore } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { TOO_LARGE, planIncrements } from "../src/increment_batch.js";
import { PageActor } from "../src/page_actor.js";
import {
  observedResetOp,
  planResets,
  answerResets,
  takeResetRound,
  type PendingReset,
} from "../src/reset_batch.js";
import {
  CONFLICT,
  FENCE,
  NOW,
  actor,
  fenceOf,
  host,
  pendingIncrement,
  setPurgeFloor,
} from "./batch_actors.js";

const OWNER_CHANGED = "the page's owner changed; retry";

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
    setPurgeFloor(50);
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
      setPurgeFloor(0);
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
    expect([...settled.lost.keys()]).toEqual([3]);
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
    expect([...settled.lost.keys()]).toEqual([3]);
    expect(settled.durable).toEqual([]);
  });
});
