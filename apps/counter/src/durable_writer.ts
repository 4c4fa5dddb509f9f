import { dcUpdatesSubject, type Bus } from "@livecount/bus";
import { encodeMessage, type IncrementRequest, type NodeReply, type ResetRequest } from "@livecount/protocol";
import { Coalescer, ConcurrencyLimit, LogThrottle, type Clock, type Logger } from "@livecount/runtime";
import {
  PartialWriteError,
  type EntryWrite,
  type Fence,
  type IncrementOp,
  type IncrementOutcome,
  type PageRecord,
  type Store,
} from "@livecount/store";
import type { CounterMetrics } from "./counter_metrics.js";
import { DurablePublisher } from "./durable_publisher.js";
import { DirtyPages } from "./dirty_pages.js";
import { takeFlushBatch, type TakenPage } from "./flush_batch.js";
import { answerIncrements, planIncrements, type PendingIncrement } from "./increment_batch.js";
import type { PageActor } from "./page_actor.js";
import { countsOf } from "./page_chunks.js";
import { RemoteWrites } from "./remote_writes.js";
import { errorReply, type AnsweredChanges, type DurableUpdate } from "./replies.js";
import {
  answerResets,
  planResets,
  resetFingerprint,
  resetUse,
  takeResetRound,
  type PendingReset,
} from "./reset_batch.js";
import { incrementChange, incrementUse, type RecentKeys } from "./recent_keys.js";

export interface DurableWriterOptions {
  readonly dc: string;
  readonly store: Store;
  readonly bus: Bus;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  /** At most one flush of dirty pages per window. */
  readonly coalesceMs: number;
  /**
   * About the most entries one flush writes (LIVECOUNT_FLUSH_MAX_WRITES: whole partitions, the last
   * may pass it; unique-visitor registers fill what the other entries leave); the rest stay dirty for
   * the next flush, which follows at once. Every script of a
   * flush waits behind the ones before it: unbounded, a store that falls behind gets flushes that
   * outlast the command timeout, fail, and are written again in full.
   */
  readonly flushMaxWrites: number;
  /**
   * Anti-entropy merges into the store at once (LIVECOUNT_AE_MERGES_IN_FLIGHT); the others wait
   * here rather than in Redis, where every DC's page chunks of a heal would queue behind each other
   * until the last passed the command timeout.
   */
  readonly mergesInFlight: number;
  /** How long an idempotency key is remembered, in ms. */
  readonly idempotencyTtlMs: number;
  /** Counters one page may hold: a change to a new one past it is refused. */
  readonly maxCountersPerPage: number;
  /** The fence of a partition this node holds, or undefined. */
  readonly fenceOf: (partition: number) => Fence | undefined;
  /** The store found the partition's fence stale: its lease is lost. */
  readonly lost: (fence: Fence) => void;
  /** The page's subject (cached by its actor when in memory). */
  readonly subjectOf: (page: string, partition: number) => string;
  /** Keys answered lately: a retry of one is answered from memory (recent_keys.ts). */
  readonly recentKeys: RecentKeys;
}

/**
 * Everything that leaves a counter node for the store goes through here, and is published only once
 * the store has it (invariant 3: durable before published):
 *
 * - presence and merged remote entries: dirty actors are flushed at most once per coalescing
 *   window, every partition's writes in one store round trip;
 * - publisher increments: group-committed, every increment queued in one turn in one round trip;
 * - resets and deletes: on the same commit chain as increments, between their batches, so the value
 *   a reset cancels is exact.
 *
 * `#persist` is the only path from a write to a publish.
 */
export class DurableWriter {
  readonly #o: DurableWriterOptions;
  readonly #dirty = new DirtyPages();
  readonly #flusher: Coalescer;
  /** Failures repeat every window while the store (or a shard of it) is down: one line per kind and interval. */
  readonly #logs = new LogThrottle();
  readonly #publisher: DurablePublisher;
  /** Increment batches and reset rounds run one after the other on this chain. */
  #tail: Promise<void> = Promise.resolve();
  #increments: PendingIncrement[] = [];
  #incrementsScheduled = false;
  #resets: PendingReset[] = [];
  readonly #remote: RemoteWrites;
  readonly #merges: ConcurrencyLimit;

  constructor(options: DurableWriterOptions) {
    this.#o = options;
    this.#remote = new RemoteWrites(options);
    this.#publisher = new DurablePublisher({
      ...options,
      logError: (err, msg, fields) => this.#logError(err, msg, fields),
    });
    this.#merges = new ConcurrencyLimit(options.mergesInFlight);
    this.#flusher = new Coalescer(
      options.clock,
      options.coalesceMs,
      () => this.#flush(),
      (err) => this.#logError(err, "flush failed"),
    );
  }

  #logError(err: unknown, msg: string, fields: Record<string, unknown> = {}): void {
    const suppressed = this.#logs.admit(msg);
    if (suppressed !== undefined) this.#o.logger.error({ err, ...fields, suppressed }, msg);
  }

  /** The actor has entries to persist and publish (changed at `since`, by default now; DirtyPages.add). */
  markDirty(actor: PageActor, since = this.#o.clock.now(), rewrite = false): void {
    this.#dirty.add(actor, since, rewrite);
    this.#flusher.request();
  }

  /** The actor left memory (it was closed first, so a flush would skip it anyway). */
  forget(actor: PageActor): void {
    this.#dirty.delete(actor);
  }

  /** Actors waiting for the next flush (diagnostics and tests). */
  get dirtyCount(): number {
    return this.#dirty.size;
  }

  /**
   * How long the oldest change not yet durable has waited, in ms (0 when none waits): a window at
   * most while the store answers, growing while it fails. The status API's flush lag.
   */
  get flushLagMs(): number {
    const since = this.#dirty.since;
    return since === undefined ? 0 : Math.max(0, this.#o.clock.now() - since);
  }

  /**
   * Queues an increment of an active actor for the next group commit; resolves once durable and
   * published (or refused by the bus: DurablePublisher).
   */
  increment(actor: PageActor, request: IncrementRequest): Promise<NodeReply> {
    return new Promise((resolve) => this.queueIncrement(actor, request, resolve));
  }

  /** `increment` without a promise of its own: `resolve` gets the reply (a batch's items share one). */
  queueIncrement(actor: PageActor, request: IncrementRequest, resolve: (reply: NodeReply) => void): void {
    this.#increments.push({ actor, request, resolve: whileQueued(actor, resolve) });
    if (this.#incrementsScheduled) return;
    this.#incrementsScheduled = true;
    // Deferred to the end of the turn: every increment read from the same socket data shares the batch.
    this.#o.clock.defer(() => {
      this.#incrementsScheduled = false;
      this.#chain(() => this.#commitIncrements(), "increment batch");
    });
  }

  /** Queues a reset or delete; it commits once every earlier change of its counter has. */
  reset(actor: PageActor, request: ResetRequest): Promise<NodeReply> {
    return new Promise((resolve) => {
      this.#resets.push({ actor, request, resolve: whileQueued(actor, resolve) });
      this.#chain(() => this.#commitResets(), "reset round");
    });
  }

  /**
   * Runs `step` on the commit chain, between increment batches and reset rounds, and settles with
   * it: for work that changes entries publisher changes are planned from (a purge).
   */
  serialized<T>(step: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#tail = this.#tail.then(() => step().then(resolve, reject));
    });
  }

  /**
   * Tells this DC's gateways that this node serves the partition now, under the lease of `epoch`:
   * they take fresh snapshots of its watched pages (PageUpdates.taken), since what its earlier
   * owner published last may never have come.
   */
  announceServing(partition: number, epoch: number): void {
    const msg = { type: "updates", partition, pages: {}, ts: this.#o.clock.now(), taken: epoch } as const;
    this.#o.bus.publish(dcUpdatesSubject(this.#o.dc, partition), encodeMessage(msg));
  }

  /**
   * Merges another DC's record of pages straight into the store (under the partition's fence), in
   * one round trip, then publishes every entry that advanced, so watchers here see what their DC
   * missed. Resolves with the entries that advanced, per page, durable: the caller gives them to the
   * pages' actors in memory, and keeps actors from loading the partition's pages meanwhile
   * (`ActorRegistry.holdLoads`). Null when the store refused the fence (another node took the
   * partition): nothing was merged.
   */
  async mergeIntoStore(
    fence: Fence,
    pages: ReadonlyMap<string, PageRecord>,
  ): Promise<Map<string, PageRecord> | null> {
    if (pages.size === 0) return new Map();
    const advanced = await this.#persist(
      async () => {
        this.#o.metrics.storeWrites.inc();
        return this.#merges.run(() => this.#o.store.mergePages(fence, pages, this.#o.dc));
      },
      (merged, ts) => {
        if (merged === null || merged.size === 0) return;
        // For this DC's gateways only, in one message: every other DC holds these entries already.
        // Counts only: gateways show no time bucket, and buckets are most of a busy page's entries.
        const counts = countsOf(merged);
        if (counts.length > 0) this.#publisher.local(fence.partition, counts, ts);
      },
    );
    if (advanced !== null) return advanced;
    this.#o.lost(fence);
    return null;
  }

  /** Persists other DCs' entries of pages not in memory (RemoteWrites). */
  writeRemote(fence: Fence, writes: readonly EntryWrite[]): Promise<void> {
    return this.#remote.write(fence, writes);
  }

  /**
   * Commits the changes queued so far and flushes every dirty page (handover, shutdown). Changes
   * that arrive meanwhile go in later batches: a steady stream of increments cannot hold a handover.
   */
  async drain(): Promise<void> {
    if (this.#increments.length > 0) this.#chain(() => this.#commitIncrements(), "increment batch");
    if (this.#resets.length > 0) this.#chain(() => this.#commitResets(), "reset round");
    await this.#tail;
    await this.#flusher.drain();
    // A flush stops at its bound: again while each leaves fewer entries waiting (not while failing).
    for (let left = Infinity, now = this.#dirty.entries; this.#dirty.size > 0 && now < left;) {
      left = now;
      await this.#flusher.drain();
      now = this.#dirty.entries;
    }
  }

  close(): void {
    this.#flusher.close();
  }

  /**
   * The one path from memory to the bus: runs `write`, then lets `publish` publish exactly what the
   * write made durable, then returns. A failed write publishes nothing.
   */
  async #persist<T>(write: () => Promise<T>, publish: (result: T, ts: number) => void): Promise<T> {
    const result = await write();
    publish(result, this.#o.clock.now());
    return result;
  }

  #publishUpdates(updates: readonly DurableUpdate[], ts: number): void {
    for (const update of updates) this.#publisher.update(update, ts);
  }

  /**
   * Appends a step to the commit chain. A step that throws is logged and the chain goes on: a bug
   * in one batch must neither crash the node nor hold every later change. Requests the failed step
   * did not answer time out at their gateway, and their retries (same keys) count once.
   */
  #chain(step: () => Promise<void>, what: string): void {
    this.#tail = this.#tail.then(step).catch((err: unknown) => {
      this.#o.logger.error({ err }, `${what} failed`);
    });
  }

  /** Every queued increment in one store round trip; replies go out after the publish. */
  async #commitIncrements(): Promise<void> {
    const batch = this.#o.recentKeys.answer(this.#increments, incrementChange);
    this.#increments = [];
    if (batch.length === 0) return;
    const plan = planIncrements(
      batch,
      this.#o.dc,
      this.#o.clock.now(),
      this.#o.fenceOf,
      this.#o.maxCountersPerPage,
    );
    for (const { pending, reply } of plan.refused) pending.resolve(reply);
    if (plan.ops.length === 0) return;
    const sent = plan.planned.map((p) => p.pending);
    const settled = await this.#commitChanges(sent, plan.ops, (outcomes) => answerIncrements(plan, outcomes));
    for (const outcome of settled?.outcomes ?? []) this.#o.metrics.increments.inc({ outcome });
    if (settled !== undefined)
      await this.#o.recentKeys.settled(settled.answers, settled.repaired, incrementUse);
  }

  /** Queued resets in rounds of at most one per counter; each round one store round trip. */
  async #commitResets(): Promise<void> {
    while (this.#resets.length > 0) {
      const { round, later } = takeResetRound(this.#o.recentKeys.answer(this.#resets, resetFingerprint));
      this.#resets = later;
      const plan = planResets(round, this.#o.dc, this.#o.clock.now(), this.#o.fenceOf);
      for (const { pending, reply } of plan.refused) pending.resolve(reply);
      if (plan.sent.length === 0) continue;
      const sent = plan.sent.map((s) => s.pending);
      const ops = plan.sent.map((s) => s.op);
      const settled = await this.#commitChanges(sent, ops, (outcomes) => answerResets(plan, outcomes));
      for (const { kind, outcome } of settled?.outcomes ?? []) this.#o.metrics.resets.inc({ kind, outcome });
      if (settled !== undefined)
        await this.#o.recentKeys.settled(settled.answers, settled.repaired, resetUse);
    }
  }

  /**
   * One store round trip of publisher changes: persisted, then published, then answered. When the
   * store fails, every change of the round answers "unavailable" (retryable: the keys make retries
   * safe) and nothing is published. Undefined in that case.
   */
  async #commitChanges<S extends AnsweredChanges>(
    sent: ReadonlyArray<{ resolve(reply: NodeReply): void }>,
    ops: readonly IncrementOp[],
    settle: (outcomes: IncrementOutcome[]) => S,
  ): Promise<S | undefined> {
    const { store, idempotencyTtlMs, metrics } = this.#o;
    let settled: S;
    try {
      settled = await this.#persist(
        async () => {
          metrics.storeWrites.inc();
          return settle(await store.increment(ops, idempotencyTtlMs));
        },
        (s, ts) => this.#publishUpdates(s.durable, ts),
      );
    } catch (err) {
      this.#logError(err, "publisher changes failed", { ops: ops.length });
      const reply = errorReply("unavailable", "the store did not answer; retry");
      for (const pending of sent) pending.resolve(reply);
      return undefined;
    }
    for (const fence of settled.lost.values()) this.#o.lost(fence);
    // Logged with the keys written back (RecentKeys.settled).
    if (settled.repaired > 0) metrics.storeRegressions.inc(settled.repaired);
    for (const { pending, reply } of settled.answers) pending.resolve(reply);
    return settled;
  }

  /**
   * Persists dirty pages' entries (up to the flush bound, unique-visitor registers last:
   * flush_batch.ts) in one round trip, then publishes this DC's that became durable.
   */
  async #flush(): Promise<void> {
    const since = this.#dirty.since;
    // Registers left for a later flush count in the lag from this one (their own age is not kept).
    const now = this.#o.clock.now();
    const { groups, taken } = takeFlushBatch(this.#dirty, this.#o.flushMaxWrites, this.#o.fenceOf, (actor) =>
      this.markDirty(actor, now),
    );
    // Pages left for the next flush: this one went out at its bound.
    if (this.#dirty.size > 0) this.#flusher.request();
    const { metrics, store } = this.#o;
    const stopTimer = metrics.flushSeconds.startTimer();
    let lost: Fence[];
    /** Partitions whose writes failed while the others went through: written again next window. */
    let failed = new Set<number>();
    try {
      lost = await this.#persist(
        async () => {
          if (groups.size === 0) return [];
          metrics.storeWrites.inc();
          try {
            return await store.write([...groups.values()]);
          } catch (err) {
            if (!(err instanceof PartialWriteError)) throw err;
            failed = new Set(err.failed.map((f) => f.partition));
            const suppressed = this.#logs.admit("partial flush");
            if (suppressed !== undefined)
              this.#o.logger.warn(
                { err, partitions: failed.size, suppressed },
                "flush failed for some partitions",
              );
            return err.result as Fence[];
          }
        },
        (refused, ts) => {
          const stale = new Set(refused.map((f) => f.partition));
          for (const { actor, updates } of taken) {
            if (stale.has(actor.partition) || failed.has(actor.partition)) continue;
            for (const [dc, counters] of updates)
              this.#publisher.update({ page: actor.page, partition: actor.partition, dc, counters }, ts);
          }
        },
      );
    } catch (err) {
      metrics.flushFailures.inc();
      this.#writeAgain(taken, since);
      throw err;
    } finally {
      stopTimer();
    }
    if (failed.size > 0) {
      metrics.flushFailures.inc();
      this.#writeAgain(
        taken.filter(({ actor }) => failed.has(actor.partition)),
        since,
      );
    }
    for (const { actor } of taken) if (!failed.has(actor.partition)) actor.written();
    metrics.flushes.inc();
    for (const fence of lost) this.#o.lost(fence);
  }

  /**
   * A flush's writes that failed go back to their actors, written and published by the next one:
   * nothing is published ahead of the store.
   */
  #writeAgain(taken: readonly TakenPage[], since: number | undefined): void {
    for (const { actor, writes, updates } of taken) {
      actor.restoreUnwritten(writes, updates.keys());
      // One torn down during the round trip was forgotten: it must not come back. Dirty since `since`.
      if (actor.status === "active") this.markDirty(actor, since);
    }
  }
}

/** Keeps the actor in memory until its change is answered. */
function whileQueued(actor: PageActor, resolve: (reply: NodeReply) => void): (reply: NodeReply) => void {
  actor.changesQueued(1);
  return (reply) => {
    actor.changesQueued(-1);
    resolve(reply);
  };
}
