import type { IncrementRequest, NodeReply, ResetRequest } from "@livecount/protocol";
import type { Fence, IncrementOutcome } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { planIncrements, answerIncrements, type PendingIncrement } from "../src/increment_batch.js";
import { PageActor, type ActorHost } from "../src/page_actor.js";
import {
  observedResetOp,
  planResets,
  answerResets,
  takeResetRound,
  type PendingReset,
} from "../src/reset_batch.js";

const NOW = 5_000;
const FENCE: Fence = { partition: 3, epoch: 7 };
const host: ActorHost = {
  dc: "dc1",
  graceMs: 0,
  now: () => NOW,
  markDirty: () => {},
  wakeAt: () => {},
  presenceFloor: () => 0,
  presenceRaised: () => {},
};

function actor(page = "p", likes = 0): PageActor {
  const a = new PageActor(host, page, 3, 0);
  a.loaded(likes > 0 ? { likes: { dc1: { p: likes, n: 0 } } } : {});
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

const fenceOf = (partition: number): Fence | undefined => (partition === 3 ? FENCE : undefined);

describe("counter - group commit of increments", () => {
  test("counter - one op per distinct change; a repeat shares it, another change under the same key does not move the value", () => {
    const a = actor("p", 10);
    const batch = [
      pendingIncrement(a, "k1", 2),
      pendingIncrement(a, "k1", 2),
      pendingIncrement(a, "k1", 5),
      pendingIncrement(a, "k2", 3),
    ];
    const plan = planIncrements(batch, "dc1", NOW, fenceOf);
    expect(plan.ops.map((o) => [o.key, o.delta, JSON.parse(o.payload).value])).toEqual([
      ["k1", 2, 12],
      ["k1", 5, 17],
      ["k2", 3, 15],
    ]);
    expect(plan.ops.every((o) => o.fence === FENCE && o.dc === "dc1")).toBe(true);
    expect(plan.refused).toEqual([]);
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
    expect(settled.durable.map((u) => [u.page, u.dc])).toEqual([
      ["p", "dc1"],
      ["q", "dc1"],
    ]);
    expect(settled.lost).toEqual(new Set([3]));
    expect(settled.outcomes).toEqual(["applied", "duplicate", "conflict", "stale"]);
  });

  test("counter - a duplicate whose stored answer is unreadable answers internal instead of breaking the batch", () => {
    const a = actor();
    const plan = planIncrements([pendingIncrement(a, "k")], "dc1", NOW, fenceOf);
    const settled = answerIncrements(plan, [{ kind: "duplicate", payload: "{not json" }]);
    expect(settled.answers[0]?.reply).toMatchObject({ type: "error", code: "internal" });
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
        counters: { likes: { p: 5, n: 5 }, "@del:likes": { p: 10, n: 0 } },
      },
    ]);
    expect(settled.lost).toEqual(new Set([3]));
    expect(settled.outcomes).toEqual([
      { kind: "delete", outcome: "applied" },
      { kind: "reset", outcome: "stale" },
    ]);
  });
});
