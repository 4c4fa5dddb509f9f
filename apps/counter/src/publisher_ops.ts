/**
 * Publisher operations of a counter node beside increments: observed resets and deletes, and page
 * listings.
 *
 * A reset cancels the value its owner observes: it adds the observed value to this data center's
 * `n` (or its negation to `p`), so increments made concurrently in other data centers survive the
 * merge. A delete is the same reset plus a tombstone: this data center's entry of `@del:<counter>`
 * is set to the counter's activity right after the reset, which hides the counter from readers
 * until it changes again (`visibleCounters` in @livecount/protocol). Both are plain PN-counter
 * entries, so they persist and replicate like any other write.
 *
 * Their deltas depend on the value at the moment they apply, so a reset is committed only when no
 * other change of its counter is in flight: resets run on the node's commit chain between increment
 * batches, and a round holds at most one reset per counter. Each is one store op, atomic with its
 * idempotency key; its fingerprint (not its delta) identifies it, so a retry after further changes
 * still gets the original answer.
 */
import {
  ProtocolError,
  activityOf,
  tombstoneOf,
  type ErrorCode,
  type ListPagesRequest,
  type NodeReply,
  type ResetRequest,
} from "@livecount/protocol";
import type { Entry } from "@livecount/crdt";
import type { Logger } from "@livecount/runtime";
import {
  StoreError,
  type Fence,
  type IncrementOp,
  type IncrementOutcome,
  type Store,
} from "@livecount/store";
import type { PageActor } from "./page_actor.js";

export type ResetOutcome = IncrementOutcome["kind"];

/** What resets need from their counter node. */
export interface ResetHost {
  readonly dc: string;
  readonly store: Store;
  readonly logger: Logger;
  /** How long a reset's idempotency key is remembered, in ms. */
  readonly idempotencyTtlMs: number;
  now(): number;
  /** The fence of a partition this node holds, or undefined. */
  fenceOf(partition: number): Fence | undefined;
  /** The store found the fence stale: the partition is lost. */
  lost(partition: number): void;
  /** Counts one committed reset or delete by outcome (metrics). */
  counted(kind: "reset" | "delete", outcome: ResetOutcome): void;
  /** Publishes this DC's durable entries of a page now, before the change is acknowledged. */
  publish(actor: PageActor, counters: ReadonlyMap<string, Entry>): void;
}

interface PendingReset {
  readonly actor: PageActor;
  readonly request: ResetRequest;
  readonly resolve: (reply: NodeReply) => void;
}

/** What a reset stores with its key and answers again to a retry. */
interface ResetPayload {
  readonly previous: number;
  readonly updatedAt: number;
}

function errorReply(code: ErrorCode, message?: string): NodeReply {
  const e = new ProtocolError(code, message);
  return { type: "error", code: e.code, message: e.message };
}

/** The key's fingerprint: a retry matches it whatever the value was when it arrived. */
export function resetFingerprint(request: ResetRequest): string {
  return `${request.tombstone ? "delete" : "reset"}:${request.counter}`;
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
  const base = {
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
  // The activity right after the reset: it adds |previous| to this DC's p or n.
  const activity = activityOf(actor.entries(request.counter)) + Math.abs(previous);
  const tombstone = tombstoneOf(request.counter);
  const tombstoneDelta = Math.max(0, activity - actor.ownEntry(tombstone).p);
  return { op: { ...base, also: [{ counter: tombstone, delta: tombstoneDelta }] }, previous };
}

/** Resets waiting for the commit chain of their node; see the module comment. */
export class ObservedResets {
  readonly #host: ResetHost;
  #queue: PendingReset[] = [];

  constructor(host: ResetHost) {
    this.#host = host;
  }

  get size(): number {
    return this.#queue.length;
  }

  /** Queues a reset of a counter of an active actor; the next `commit()` answers it. */
  enqueue(actor: PageActor, request: ResetRequest): Promise<NodeReply> {
    return new Promise((resolve) => this.#queue.push({ actor, request, resolve }));
  }

  /** Commits every queued reset, in rounds of one per counter. Never rejects: failures are answers. */
  async commit(): Promise<void> {
    while (this.#queue.length > 0) {
      const round: PendingReset[] = [];
      const later: PendingReset[] = [];
      const counters = new Set<string>();
      for (const pending of this.#queue) {
        const id = `${pending.request.page}\u0000${pending.request.counter}`;
        if (counters.has(id)) later.push(pending);
        else {
          counters.add(id);
          round.push(pending);
        }
      }
      this.#queue = later;
      try {
        await this.#commitRound(round);
      } catch (err) {
        this.#host.logger.error({ err, resets: round.length }, "reset round failed");
        for (const pending of round) pending.resolve(errorReply("internal"));
      }
    }
  }

  async #commitRound(round: readonly PendingReset[]): Promise<void> {
    const host = this.#host;
    const now = host.now();
    const sent: Array<{ pending: PendingReset; op: IncrementOp; previous: number }> = [];
    for (const pending of round) {
      const fence = host.fenceOf(pending.actor.partition);
      if (fence === undefined || pending.actor.status !== "active") {
        pending.resolve(errorReply("unavailable", "the page's owner changed; retry"));
        continue;
      }
      sent.push({ pending, ...observedResetOp(pending.actor, pending.request, fence, host.dc, now) });
    }
    if (sent.length === 0) return;
    let outcomes: IncrementOutcome[];
    try {
      outcomes = await host.store.increment(
        sent.map((s) => s.op),
        host.idempotencyTtlMs,
      );
    } catch (err) {
      host.logger.error({ err, resets: sent.length }, "reset batch failed");
      for (const s of sent) s.pending.resolve(errorReply("unavailable", "the store did not answer; retry"));
      return;
    }
    sent.forEach((s, i) => {
      const { actor, request } = s.pending;
      const outcome = outcomes[i];
      const kind = request.tombstone ? "delete" : "reset";
      host.counted(kind, outcome?.kind ?? "stale");
      switch (outcome?.kind) {
        case "applied": {
          // Published before the answer: an acknowledged reset must reach every watcher even if
          // this node dies right after (its successor does not know to publish it again).
          const durable = new Map([[request.counter, outcome.entry]]);
          actor.applied(request.counter, outcome.entry);
          if (request.tombstone && outcome.also?.[0] !== undefined) {
            actor.applied(tombstoneOf(request.counter), outcome.also[0]);
            durable.set(tombstoneOf(request.counter), outcome.also[0]);
          }
          host.publish(actor, durable);
          return s.pending.resolve(resetReply(request, { previous: s.previous, updatedAt: now }, false));
        }
        case "duplicate": {
          // The first try may have become durable and never been published (its owner crashed).
          const counters = request.tombstone
            ? [request.counter, tombstoneOf(request.counter)]
            : [request.counter];
          host.publish(actor, new Map(counters.map((c) => [c, actor.ownEntry(c)])));
          return s.pending.resolve(resetReply(request, parsePayload(outcome.payload), true));
        }
        case "conflict":
          return s.pending.resolve(errorReply("idempotency_conflict"));
        default:
          s.pending.resolve(errorReply("unavailable", "the page's owner changed; retry"));
          host.lost(s.op.fence.partition);
      }
    });
  }
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

function parsePayload(payload: string): ResetPayload {
  const { previous, updatedAt } = JSON.parse(payload) as Partial<ResetPayload>;
  if (!Number.isSafeInteger(previous) || !Number.isSafeInteger(updatedAt))
    throw new Error(`malformed reset payload: ${payload}`);
  return { previous: previous!, updatedAt: updatedAt! };
}

/** Answers a listing from this data center's store: any counter node can. */
export async function listPages(store: Store, request: ListPagesRequest): Promise<NodeReply> {
  try {
    const list = await store.listPages(request.prefix, request.cursor, request.limit);
    return {
      type: "page_list",
      pages: list.pages,
      ...(list.cursor !== undefined ? { cursor: list.cursor } : {}),
    };
  } catch (err) {
    if (err instanceof StoreError) throw new ProtocolError("unavailable", "the store did not answer; retry");
    throw err;
  }
}
