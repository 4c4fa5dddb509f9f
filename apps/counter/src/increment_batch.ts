/**
 * Group commit of publisher increments, as pure steps: `planIncrements` turns the increments that
 * queued in one turn into store ops, and `answerIncrements` turns the store's outcomes into replies,
 * the entries that became durable, and the partitions found lost.
 *
 * An answer is the counter's value over all data centers right after the change: the other data
 * centers' entries as this owner holds them when it plans (`base`), plus this data center's entry as
 * the store returns it after the op. The store, not the plan, knows the latter: an earlier op of the
 * same batch may be a retry the store answers as a duplicate, which does not move the entry. The
 * answer kept with the key for retries is written the same way, by the store (OWN_VALUE).
 */
import { minuteOf, windowCounterOf, type IncrementRequest, type NodeReply } from "@livecount/protocol";
import type { Entry } from "@livecount/crdt";
import { OWN_VALUE, type Fence, type IncrementOp, type IncrementOutcome } from "@livecount/store";
import type { PageActor } from "./page_actor.js";
import { DurableEntries, errorReply, parsePayload, type DurableUpdate } from "./replies.js";

export interface PendingIncrement {
  readonly actor: PageActor;
  readonly request: IncrementRequest;
  readonly resolve: (reply: NodeReply) => void;
}

/** The value and time of an answer, as a reply carries them. */
interface AnswerPayload {
  readonly value: number;
  readonly updatedAt: number;
}

/**
 * An increment of the batch: sent as op `op`, answered with `base` (the other data centers' entries)
 * plus this data center's entry after the op; or the same request as an earlier one.
 */
type Planned =
  | { readonly pending: PendingIncrement; readonly op: number; readonly base: number }
  | { readonly pending: PendingIncrement; readonly sameAs: number };

export interface IncrementPlan {
  readonly ops: IncrementOp[];
  readonly planned: Planned[];
  readonly now: number;
  /** Increments answered without the store (their owner changed): reply at once. */
  readonly refused: Array<{ readonly pending: PendingIncrement; readonly reply: NodeReply }>;
}

const OWNER_CHANGED = "the page's owner changed; retry";
/** A data center's entry of a counter is two safe integers: every replica refuses a larger one. */
export const TOO_LARGE = `the change would take the counter's entry in this data center past ${Number.MAX_SAFE_INTEGER}`;
/** Its part of the store failed or was not confirmed on the replicas it must reach: retry, same key. */
export const UNCONFIRMED = "the store did not confirm the change; retry";

/**
 * One store op per distinct (page, key, counter, change) of the batch. A retry of the same request
 * in the same batch shares its op's answer; a different change under a key already in the batch is
 * sent too, and the store (handling ops in order) answers it as a conflict or a duplicate.
 */
export function planIncrements(
  batch: readonly PendingIncrement[],
  dc: string,
  now: number,
  fenceOf: (partition: number) => Fence | undefined,
  maxCountersPerPage = Infinity,
): IncrementPlan {
  const opByRequest = new Map<string, number>();
  /** Per page and counter, those an op of the batch planned so far changes. */
  const touched = new Set<string>();
  /** Per page, the counters new to it that the batch's ops planned so far make. */
  const made = new Map<string, number>();
  const plan: IncrementPlan = { ops: [], planned: [], now, refused: [] };
  for (const pending of batch) {
    const { actor, request } = pending;
    const fence = fenceOf(actor.partition);
    if (fence === undefined || actor.status !== "active") {
      plan.refused.push({ pending, reply: errorReply("unavailable", OWNER_CHANGED) });
      continue;
    }
    const keyId = `${request.page}\u0000${request.key}`;
    const requestId = `${keyId}\u0000${request.counter}\u0000${request.delta}`;
    const same = opByRequest.get(requestId);
    if (same !== undefined) {
      plan.planned.push({ pending, sameAs: same });
      continue;
    }
    // Read without creating the counter: a refused increment must leave no trace in the actor.
    const own = actor.entries(request.counter)[dc] ?? { p: 0, n: 0 };
    const counterId = `${request.page}\u0000${request.counter}`;
    const isNew = !actor.holds(request.counter) && !touched.has(counterId);
    if (isNew && actor.counterCount + (made.get(request.page) ?? 0) >= maxCountersPerPage) {
      const message = `the page holds ${maxCountersPerPage} counters already (LIVECOUNT_MAX_COUNTERS_PER_PAGE)`;
      plan.refused.push({ pending, reply: errorReply("invalid_counter", message) });
      continue;
    }
    if (isNew) made.set(request.page, (made.get(request.page) ?? 0) + 1);
    touched.add(counterId);
    const base = actor.value(request.counter) - (own.p - own.n);
    opByRequest.set(requestId, plan.ops.length);
    plan.planned.push({ pending, op: plan.ops.length, base });
    const startAt = actor.startAt(request.counter);
    plan.ops.push({
      ...(startAt > 0 ? { startAt } : {}),
      fence,
      page: request.page,
      counter: request.counter,
      dc,
      delta: request.delta,
      key: request.key,
      // The change counts in its minute's window bucket too, atomically with the counter under the key.
      ...(request.delta !== 0
        ? { also: [{ counter: windowCounterOf(request.counter, minuteOf(now)), delta: request.delta }] }
        : {}),
      // {"value":V,"base":B,"own":<entry value after the op, written by the store>,"updatedAt":T}.
      // `value`, the planner's estimate, is for owners of the previous release (a rolling upgrade or
      // a rollback shares the store): they read only value and updatedAt. Readers here use base + own.
      payload: `{"value":${actor.value(request.counter) + request.delta},"base":${base},"own":${OWN_VALUE},"updatedAt":${now}}`,
    });
  }
  return plan;
}

export interface AnsweredIncrements {
  readonly answers: Array<{ readonly pending: PendingIncrement; readonly reply: NodeReply }>;
  /** Entries to publish before any reply goes out. */
  readonly durable: readonly DurableUpdate[];
  /** Per partition whose fence the store found stale, the fence it refused. */
  readonly lost: Map<number, Fence>;
  /** Outcome of each op sent, for metrics. */
  readonly outcomes: Array<IncrementOutcome["kind"]>;
  readonly repaired: number;
}

/**
 * The entry of this DC's `counter` that an applied change of `delta` leaves, as the owner counts it,
 * installed in the actor. The store's, unless it is below the actor's entry before the change plus
 * the change: then the store lost writes the owner saw applied (a Redis restarted from its last
 * `appendfsync everysec`, or failed over without WAIT), and the owner's count plus the change is the
 * entry. It is written back by the next flush (as an unconfirmed merge is), so later changes build
 * on it; until then the store answers each of them low again, and each is counted the same way.
 */
export function countedEntry(
  actor: PageActor,
  dc: string,
  counter: string,
  delta: number,
  stored: Entry,
): Entry {
  const before = actor.ownEntry(counter);
  const p = before.p + Math.max(delta, 0);
  const n = before.n + Math.max(-delta, 0);
  if (stored.p >= p && stored.n >= n) {
    actor.applied(counter, stored);
    return stored;
  }
  const counted = { p: Math.max(stored.p, p), n: Math.max(stored.n, n) };
  actor.mergeDurable({ [counter]: { [dc]: counted } }, "unconfirmed");
  return counted;
}

/**
 * Replies for a committed plan. Applied ops install the stored entry in their actor; a duplicate
 * republishes the actor's entry (the first try may have become durable and never been published:
 * its owner crashed or handed the page over in between).
 */
export function answerIncrements(
  plan: IncrementPlan,
  outcomes: readonly IncrementOutcome[],
): AnsweredIncrements {
  const answers: AnsweredIncrements["answers"] = [];
  const durable = new DurableEntries();
  const lost = new Map<number, Fence>();
  const kinds: AnsweredIncrements["outcomes"] = [];
  const replies: NodeReply[] = [];
  let repaired = 0;
  for (const item of plan.planned) {
    const { pending } = item;
    if ("sameAs" in item) continue;
    const { actor, request } = pending;
    const outcome = outcomes[item.op];
    const op = plan.ops[item.op]!;
    let reply: NodeReply;
    switch (outcome?.kind) {
      case "applied": {
        const entry = countedEntry(actor, op.dc, request.counter, request.delta, outcome.entry);
        if (entry !== outcome.entry) repaired++;
        durable.add(actor, op.dc, request.counter, entry);
        // The window bucket is published with it; the actor does not keep buckets (PageActor).
        const bucket = op.also?.[0];
        if (bucket !== undefined && outcome.also?.[0] !== undefined)
          durable.add(actor, op.dc, bucket.counter, outcome.also[0]);
        const value = item.base + entry.p - entry.n;
        reply = incremented(request, { value, updatedAt: plan.now }, false);
        break;
      }
      case "duplicate": {
        // The store's entry may hold a first try this actor never heard of (its answer was lost).
        if (outcome.entry !== undefined) actor.applied(request.counter, outcome.entry);
        const answer = storedAnswer(outcome.payload);
        reply = answer !== undefined ? incremented(request, answer, true) : errorReply("internal");
        // The first try may never have been published (its owner crashed): publish it again, to this
        // DC's gateways only for a settled delete (PageActor.republishTo).
        const to = actor.republishTo(request.counter);
        if (to !== "none")
          durable.add(actor, op.dc, request.counter, actor.ownEntry(request.counter), to === "local");
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
        reply = errorReply("unavailable", OWNER_CHANGED);
        lost.set(op.fence.partition, op.fence);
    }
    kinds.push(outcome?.kind ?? "stale");
    replies[item.op] = reply;
    answers.push({ pending, reply });
  }
  for (const item of plan.planned) {
    if (!("sameAs" in item)) continue;
    const original = replies[item.sameAs];
    answers.push({
      pending: item.pending,
      reply:
        original?.type === "incremented"
          ? { ...original, duplicate: true }
          : (original ?? errorReply("internal")),
    });
  }
  return { answers, durable: durable.updates(), lost, outcomes: kinds, repaired };
}

function incremented(request: IncrementRequest, answer: AnswerPayload, duplicate: boolean): NodeReply {
  return {
    type: "incremented",
    page: request.page,
    counter: request.counter,
    value: answer.value,
    updatedAt: answer.updatedAt,
    duplicate,
  };
}

/**
 * The answer kept with a key: `{"base","own","updatedAt"}` (value = base + own), or the
 * `{"value","updatedAt"}` that owners wrote before answers were completed by the store (kept for a
 * day, the keys' TTL, so both are read).
 */
function storedAnswer(payload: string): AnswerPayload | undefined {
  const split = parsePayload(payload, ["base", "own", "updatedAt"]);
  if (split !== undefined) return { value: split.base + split.own, updatedAt: split.updatedAt };
  return parsePayload(payload, ["value", "updatedAt"]);
}
