/**
 * Group commit of increments (increment_batch.ts), planned and answered on page actors without a
 * store: one op per distinct change, the answer kept for retries (and readable by the previous
 * release), outcomes turned into replies. Resets are in commit_batches_resets.test.ts.
 */
import { OWN_VALUE, type IncrementOutcome } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { TOO_LARGE, planIncrements, answerIncrements } from "../src/increment_batch.js";
import { PageActor } from "../src/page_actor.js";
import { CONFLICT, FENCE, NOW, actor, fenceOf, host, pendingIncrement } from "./batch_actors.js";

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
    expect([...settled.lost.keys()]).toEqual([3]);
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
    expect([...settled.lost.keys()]).toEqual([3]);
    expect(settled.durable).toEqual([]);
  });
});
