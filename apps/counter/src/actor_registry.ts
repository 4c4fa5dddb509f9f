import { VIEWERS_COUNTER } from "@livecount/protocol";
import type { Clock, Logger } from "@livecount/runtime";
import type { Store } from "@livecount/store";
import type { CounterMetrics } from "./counter_metrics.js";
import { PageActor, type ActorHost } from "./page_actor.js";

export interface ActorRegistryOptions {
  readonly dc: string;
  readonly graceMs: number;
  /** After taking a partition over, how long pages with stored viewers hold them while gateways resync. */
  readonly settleMs: number;
  /** An idle actor leaves memory after this long without activity. */
  readonly passivateMs: number;
  readonly clock: Clock;
  readonly store: Store;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  /** Whether this node holds the partition's lease right now. */
  readonly isHeld: (partition: number) => boolean;
  /** The actor has entries to persist and publish: the durable writer's flush takes it. */
  readonly markDirty: (actor: PageActor) => void;
  /** The page leaves this node: every collaborator that keeps per-page state forgets it. */
  readonly forget: (actor: PageActor) => void;
}

/** Why an actor leaves memory; every reason goes through the same teardown. */
export type TeardownReason =
  "passivated" | "partition_lost" | "partition_released" | "load_failed" | "shutdown";

/**
 * The page actors of one counter node: created on demand and loaded from the store, ticked when a
 * viewer's grace or a settle window ends, passivated when idle, dropped with their partition. Every
 * way out goes through `#teardown`, so no collection keeps a page behind.
 */
export class ActorRegistry implements ActorHost {
  readonly dc: string;
  readonly graceMs: number;
  readonly #o: ActorRegistryOptions;
  readonly #actors = new Map<string, PageActor>();
  /** actor -> when it must be ticked: the earliest end of a lingering viewer's grace or of its settle window. */
  readonly #deadlines = new Map<PageActor, number>();
  /** partition -> until when pages loaded there hold their stored viewers (after a takeover). */
  readonly #settleUntil = new Map<number, number>();
  /** partition -> a store merge loads of its pages must wait for (see `holdLoads`). */
  readonly #loadBarriers = new Map<number, Promise<void>>();

  constructor(options: ActorRegistryOptions) {
    this.#o = options;
    this.dc = options.dc;
    this.graceMs = options.graceMs;
  }

  // --- ActorHost ---------------------------------------------------------------------------------

  now(): number {
    return this.#o.clock.now();
  }

  markDirty(actor: PageActor): void {
    this.#o.markDirty(actor);
  }

  wakeAt(actor: PageActor, at: number): void {
    if (this.#actors.get(actor.page) !== actor) return;
    const current = this.#deadlines.get(actor);
    if (current === undefined || at < current) this.#deadlines.set(actor, at);
  }

  // --- lookup ------------------------------------------------------------------------------------

  /** The page's actor, created and loading if it was not in memory. */
  get(page: string, partition: number): PageActor {
    const existing = this.#actors.get(page);
    if (existing !== undefined) return existing;
    const settleUntil = this.#settleUntil.get(partition) ?? 0;
    const actor = new PageActor(this, page, partition, settleUntil > this.now() ? settleUntil : 0);
    this.#actors.set(page, actor);
    this.#o.metrics.actors.set(this.#actors.size);
    const barrier = this.#loadBarriers.get(partition);
    (barrier === undefined ? this.#o.store.load(page) : barrier.then(() => this.#o.store.load(page))).then(
      (record) => actor.loaded(record),
      (err: unknown) => {
        this.#o.logger.error({ err, page }, "page load failed");
        this.#teardown(actor, "load_failed", err);
      },
    );
    return actor;
  }

  /** The page's actor if it is in memory (loading or active). */
  find(page: string): PageActor | undefined {
    return this.#actors.get(page);
  }

  /** Runs `work` in the page's actor, in mailbox order, and resolves with its (awaited) result. */
  run<T>(page: string, partition: number, work: (actor: PageActor) => T | Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const actor = this.get(page, partition);
      actor.run((failure) => {
        if (failure !== undefined) reject(failure);
        else resolve(work(actor));
      });
    });
  }

  get size(): number {
    return this.#actors.size;
  }

  /** Pages with a tick scheduled (diagnostics and tests). */
  get scheduled(): number {
    return this.#deadlines.size;
  }

  // --- partitions --------------------------------------------------------------------------------

  /**
   * Pages of the partition that start loading before `until` settles wait for it: a merge straight
   * into the store (pages not in memory) must not be missed by an actor that loads meanwhile.
   */
  holdLoads(partition: number, until: Promise<unknown>): void {
    const previous = this.#loadBarriers.get(partition);
    const barrier = Promise.all([previous, until]).then(
      () => undefined,
      () => undefined,
    );
    this.#loadBarriers.set(partition, barrier);
    void barrier.then(() => {
      if (this.#loadBarriers.get(partition) === barrier) this.#loadBarriers.delete(partition);
    });
  }

  /**
   * The partition starts serving here (taken over, or taken back, and bootstrapped): presence resyncs
   * from gateways start now, so pages with stored viewers hold them for the settle window. Pages
   * where a dead owner left viewers are woken, so they settle even if nobody touches them again.
   */
  partitionServing(partition: number): void {
    this.#settleUntil.set(partition, this.now() + this.#o.settleMs);
    void this.#wakeLeftBehind(partition);
  }

  /** Drops every actor of the partition: it was handed over (after a flush) or its lease was lost. */
  dropPartition(partition: number, reason: "partition_lost" | "partition_released"): void {
    for (const actor of [...this.#actors.values()]) {
      if (actor.partition === partition) this.#teardown(actor, reason);
    }
    this.#settleUntil.delete(partition);
  }

  // --- time --------------------------------------------------------------------------------------

  /** Ticks every actor whose deadline has come: graces end, settle windows close. */
  tick(now: number): void {
    for (const [actor, at] of this.#deadlines) {
      if (at > now) continue;
      this.#deadlines.delete(actor);
      // A tick may schedule the actor's next deadline (the next lingering viewer).
      if (actor.status === "active") actor.tick(now);
    }
  }

  /** Lets idle actors leave memory: no viewers, nothing to write, untouched for `passivateMs`. */
  passivateIdle(now: number): void {
    for (const actor of [...this.#actors.values()]) {
      if (actor.isIdle && now - actor.lastActive >= this.#o.passivateMs) this.#teardown(actor, "passivated");
    }
  }

  /** Drops every actor (shutdown, after the last flush). */
  close(): void {
    for (const actor of [...this.#actors.values()]) this.#teardown(actor, "shutdown");
    this.#settleUntil.clear();
  }

  /**
   * The one way an actor leaves: out of every collection, closed, its page forgotten by
   * collaborators. Only once: an actor torn down already (its partition was lost while it loaded)
   * must not make collaborators forget the page again, since a newer actor may hold it by now.
   */
  #teardown(actor: PageActor, reason: TeardownReason, cause?: unknown): void {
    if (actor.status === "closed") return;
    if (this.#actors.get(actor.page) === actor) this.#actors.delete(actor.page);
    this.#deadlines.delete(actor);
    actor.close(cause);
    this.#o.forget(actor);
    this.#o.metrics.actors.set(this.#actors.size);
    if (this.#o.logger.isLevelEnabled("debug"))
      this.#o.logger.debug({ page: actor.page, reason }, "actor left memory");
  }

  async #wakeLeftBehind(partition: number): Promise<void> {
    let refs;
    try {
      refs = await this.#o.store.nonZeroEntries(partition);
    } catch (err) {
      this.#o.logger.error(
        { err, partition },
        "could not list pages with presence; they correct when next touched",
      );
      return;
    }
    if (!this.#o.isHeld(partition)) return;
    for (const ref of refs) {
      if (ref.counter === VIEWERS_COUNTER && ref.dc === this.dc) this.get(ref.page, partition);
    }
  }
}
