/**
 * Observed resets and deletes, as pure steps of the durable writer's commit chain.
 *
 * A reset cancels the value its owner observes: it adds the observed value to this data center's
 * `n` (or its negation to `p`), so increments made concurrently in other data centers survive the
 * merge. A delete is the same reset plus a tombstone: this data center's entry of `@del:<counter>`
 * is set to the counter's activity right after the reset, which hides the counter from readers
 * until it changes again (`visibleCounters` in @livecount/protocol). Both are plain PN-counter
 * entries, so they persist and replicate like any other write.
 *
 * Their deltas depend on the value at the moment they apply, so a reset is committed only when no
 * other change of its counter is in flight: resets run on the commit chain between increment
 * batches, and a round holds at most one reset per counter. Each is one store op, atomic with its
 * idempotency key; its fingerprint (not its delta) identifies it, so a retry after further changes
 * still gets the original answer.
 */
import { activityOf, tombstoneOf, type NodeReply, type ResetRequest } from "@livecount/protocol";
import type { Fence, IncrementOp, IncrementOutcome } from "@livecount/store";
import { TOO_LARGE, UNCONFIRMED, countedEntry } from "./increment_batch.js";
import { DurableEntries, errorReply, parsePayload, type DurableUpdate } from "./replies.js";
import type { PageActor } from "./page_actor.js";
import type { KeyUse } from "./recent_keys.js";

export interface PendingReset {
  readonly actor: PageActor;
  readonly request: ResetRequest;
  readonly resolve: (reply: NodeReply) => void;
}

/** What a reset stores with its key and answers again to a retry. */
interface ResetPayload {
  readonly previous: number;
  readonly updatedAt: number;
}

/** The key's fingerprint: a retry matches it whatever the value was when it arrived. */
export function resetFingerprint(request: ResetRequest): string {
  return `${request.tombstone ? "delete" : "reset"}:${request.counter}`;
}

/** What a reset does with its key (RecentKeys): its fingerprint, and its answer as the store keeps it. */
export function resetUse(request: ResetRequest, reply: NodeReply): KeyUse {
  const fingerprint = resetFingerprint(request);
  const answer = reply.type === "counter_reset" ? reply : { previous: 0, updatedAt: 0 };
  const payload = JSON.stringify({ previous: answer.previous, updatedAt: answer.updatedAt });
  const { page, key, counter } = request;
  return { change: fingerprint, record: { page, key, counter, delta: 0, fingerprint, payload } };
}

/**
 * The store op of an observed reset (or delete) of `request.counter` as `actor` holds it now: every
 * change of the counter before it must have been applied to the actor.
 */
export function observedResetOp(
  actor: PageActor,
  request: ResetRequest,
  fence: Fence,
  dc: string,
  now: number,
): { op: IncrementOp; previous: number } {
  const previous = actor.value(request.counter);
  const payload: ResetPayload = { previous, updatedAt: now };
  // A counter with no entry here since a purge: the store starts this DC's entry at the purge floor.
  // A reset that changes nothing (the counter is at 0) writes no entry: it must not make one appear.
  const startAt = previous !== 0 ? actor.startAt(request.counter) : 0;
  const base = {
    ...(startAt > 0 ? { startAt } : {}),
    fence,
    page: request.page,
    counter: request.counter,
    dc,
    delta: -previous,
    key: request.key,
    payload: JSON.stringify(payload),
    fingerprint: resetFingerprint(request),
  };
  if (!request.tombstone) return { op: base, previous };
  // The activity right after the reset: it adds |previous| to this DC's p or n (which start at the
  // floor when absent).
  const activity = activityOf(actor.entries(request.counter)) + 2 * startAt + Math.abs(previous);
  const tombstone = tombstoneOf(request.counter);
  const tombstoneDelta = Math.max(0, activity - actor.ownEntry(tombstone).p);
  return { op: { ...base, also: [{ counter: tombstone, delta: tombstoneDelta }] }, previous };
}

/** Splits the queue into a round with at most one reset per counter, and what waits for the next. */
export function takeResetRound(queue: readonly PendingReset[]): {
  round: PendingReset[];
  later: PendingReset[];
} {
  const round: PendingReset[] = [];
  const later: PendingReset[] = [];
  const counters = new Set<string>();
  for (const pending of queue) {
    const id = `${pending.request.page}\u0000${pending.request.counter}`;
    if (counters.has(id)) later.push(pending);
    else {
      counters.add(id);
      round.push(pending);
    }
  }
  return { round, later };
}

export interface ResetPlan {
  readonly sent: Array<{
    readonly pending: PendingReset;
    readonly op: IncrementOp;
    readonly previous: number;
  }>;
  readonly refused: Array<{ readonly pending: PendingReset; readonly reply: NodeReply }>;
  readonly now: number;
}

export function planResets(
  round: readonly PendingReset[],
  dc: string,
  now: number,
  fenceOf: (partition: number) => Fence | undefined,
): ResetPlan {
  const plan: ResetPlan = { sent: [], refused: [], now };
  for (const pending of round) {
    const fence = fenceOf(pending.actor.partition);
    if (fence === undefined || pending.actor.status !== "active") {
      plan.refused.push({ pending, reply: errorReply("unavailable", "the page's owner changed; retry") });
      continue;
    }
    const sent = observedResetOp(pending.actor, pending.request, fence, dc, now);
    // The value over all data centers, or a delete's activity, may be past what an op can carry
    // (every DC's entry below the limit): refused here, or the store would refuse the whole round.
    // Whether the change fits this DC's entries is the store's to say, after the key (too_large).
    if (![sent.op.delta, ...(sent.op.also ?? []).map((c) => c.delta)].every(Number.isSafeInteger)) {
      plan.refused.push({ pending, reply: errorReply("invalid_body", TOO_LARGE) });
      continue;
    }
    plan.sent.push({ pending, ...sent });
  }
  return plan;
}

export interface AnsweredResets {
  readonly answers: Array<{ readonly pending: PendingReset; readonly reply: NodeReply }>;
  /** Published before any answer: an acknowledged reset must reach every watcher even if this node dies right after. */
  readonly durable: readonly DurableUpdate[];
  /** Per partition whose fence the store found stale, the fence it refused. */
  readonly lost: Map<number, Fence>;
  readonly outcomes: Array<{ readonly kind: "reset" | "delete"; readonly outcome: IncrementOutcome["kind"] }>;
  readonly repaired: number;
}

export function answerResets(plan: ResetPlan, outcomes: readonly IncrementOutcome[]): AnsweredResets {
  const answers: AnsweredResets["answers"] = [];
  const lost = new Map<number, Fence>();
  const kinds: AnsweredResets["outcomes"] = [];
  const durable = new DurableEntries();
  let repaired = 0;
  plan.sent.forEach((s, i) => {
    const { actor, request } = s.pending;
    const outcome = outcomes[i];
    const tombstone = tombstoneOf(request.counter);
    kinds.push({ kind: request.tombstone ? "delete" : "reset", outcome: outcome?.kind ?? "stale" });
    let reply: NodeReply;
    switch (outcome?.kind) {
      case "applied": {
        const entry = countedEntry(actor, s.op.dc, request.counter, s.op.delta, outcome.entry);
        if (entry !== outcome.entry) repaired++;
        durable.add(actor, s.op.dc, request.counter, entry);
        const tomb = s.op.also?.[0];
        if (request.tombstone && tomb !== undefined && outcome.also?.[0] !== undefined) {
          const tombEntry = countedEntry(actor, s.op.dc, tombstone, tomb.delta, outcome.also[0]);
          if (tombEntry !== outcome.also[0]) repaired++;
          durable.add(actor, s.op.dc, tombstone, tombEntry);
        }
        reply = resetReply(request, { previous: s.previous, updatedAt: plan.now }, false);
        break;
      }
      case "duplicate": {
        // The store's entries may hold a first try this actor never heard of (its answer was lost).
        if (outcome.entry !== undefined) actor.applied(request.counter, outcome.entry);
        const tombEntry = outcome.also?.[0];
        if (request.tombstone && tombEntry !== undefined) actor.applied(tombstone, tombEntry);
        // The first try may have become durable and never been published (its owner crashed): its
        // entries go out again, to this DC's gateways only for a settled delete (PageActor.republishTo).
        const to = actor.republishTo(request.counter);
        if (to !== "none")
          for (const counter of request.tombstone ? [request.counter, tombstone] : [request.counter])
            durable.add(actor, s.op.dc, counter, actor.ownEntry(counter), to === "local");
        const answer = parsePayload(outcome.payload, ["previous", "updatedAt"]);
        reply = answer !== undefined ? resetReply(request, answer, true) : errorReply("internal");
        break;
      }
      case "conflict":
        reply = errorReply("idempotency_conflict");
        break;
      case "too_large":
        reply = errorReply("invalid_body", TOO_LARGE);
        break;
      case "unavailable":
        // Its shard of the store failed while the rest of the batch went through.
        reply = errorReply("unavailable", UNCONFIRMED);
        break;
      default:
        reply = errorReply("unavailable", "the page's owner changed; retry");
        lost.set(s.op.fence.partition, s.op.fence);
    }
    answers.push({ pending: s.pending, reply });
  });
  return { answers, durable: durable.updates(), lost, outcomes: kinds, repaired };
}

function resetReply(request: ResetRequest, answer: ResetPayload, duplicate: boolean): NodeReply {
  return {
    type: "counter_reset",
    page: request.page,
    counter: request.counter,
    previous: answer.previous,
    updatedAt: answer.updatedAt,
    duplicate,
  };
}
