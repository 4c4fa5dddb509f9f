import { LogThrottle, sleep, type Clock, type Logger } from "@livecount/runtime";
import { SERIES_PREFIXES, VIEWERS_COUNTER } from "@livecount/protocol";
import { isPresenceCounter, type PageRecord, type Store } from "@livecount/store";
import { DEFAULT_VISITOR_KEY } from "./counter_config.js";
import type { CounterMetrics } from "./counter_metrics.js";
import type { OccupancyWatch } from "./occupancy.js";
import { PageActor, type ActorHost } from "./page_actor.js";
import { VisitorHash } from "./visitor_hash.js";

export interface ActorRegistryOptions {
  readonly dc: string;
  readonly graceMs: number;
  /** After taking a partition over, how long pages with stored viewers hold them while gateways resync. */
  readonly settleMs: number;
  /** An idle actor leaves memory after this long without activity. */
  readonly passivateMs: number;
  /**
   * Actors past this many make the least recently used idle ones leave at once. Actors with viewers
   * or pending work always stay: presence is never dropped to make room.
   */
  readonly maxActors: number;
  readonly clock: Clock;
  readonly store: Store;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  /** The actor has entries to persist and publish: the durable writer's flush takes it. */
  readonly markDirty: (actor: PageActor, rewrite?: boolean) => void;
  /** The page leaves this node: every collaborator that keeps per-page state forgets it. */
  readonly forget: (actor: PageActor) => void;
  /** Occupancy webhooks, when configured: told when a page's viewers may move; keeps pages with viewers anywhere. */
  readonly occupancy?: OccupancyWatch;
  /** Whether a data center's viewers count now (DcLiveness; default: every one's). */
  readonly isLive?: (dc: string) => boolean;
  /** LIVECOUNT_VISITOR_KEY (default: the development key). */
  readonly visitorKey?: string;
}

/** First and largest wait before reading a partition's presence floor again. */
const FLOOR_RETRY_MS = 100;
const FLOOR_RETRY_MAX_MS = 2_000;
/** Past the cap, idle actors leave until this share of it is left. */
const CAP_HEADROOM = 0.9;

/** Why an actor leaves memory; every reason goes through the same teardown. */
export type TeardownReason =
  "passivated" | "evicted" | "partition_lost" | "partition_released" | "load_failed" | "shutdown";

/** Every data center counts (no liveness given: tests, one DC). */
const ALL_LIVE = (): boolean => true;

/**
 * The page actors of one counter node: created on demand and loaded from the store, ticked when a
 * viewer's grace or a settle window ends, passivated when idle, dropped with their partition. Every
 * way out goes through `#teardown`, so no collection keeps a page behind.
 */
export class ActorRegistry implements ActorHost {
  readonly dc: string;
  readonly graceMs: number;
  readonly visitorHash: VisitorHash;
  readonly #o: ActorRegistryOptions;
  /** Lines that can repeat per request or message, throttled (LogThrottle). */
  readonly #logs = new LogThrottle();
  readonly #actors = new Map<string, PageActor>();
  /**
   * The same actors by partition: a handover drops partitions one by one, and a scan of every actor
   * for each of them cost O(partitions x actors): 0.7 and 1.2 s of the two nodes' loops letting 256
   * partitions and 100,000 actors go (docs/benchmarks.md, "Heal merges without a promise per page").
   */
  readonly #byPartition = new Map<number, Set<PageActor>>();
  /** actor -> when (monotonic) it must be ticked: the earliest end of a lingering viewer's grace or of its settle window. */
  readonly #deadlines = new Map<PageActor, number>();
  /**
   * partition -> until when (monotonic) pages loaded there hold their stored viewers (after a
   * takeover). A partition is here from when it starts serving until it is dropped: a lease that
   * ran out and was renewed late keeps it (the fence is gone for a while, the partition is not).
   */
  readonly #settleUntil = new Map<number, number>();
  /** Over the cap with every actor busy, the size at which making room is tried again (0: at once). */
  #nextRoomScanAt = 0;
  /** partition -> a store merge loads of its pages must wait for (see `holdLoads`). */
  readonly #loadBarriers = new Map<number, Promise<void>>();
  /** partition -> its presence floor: what the store says, raised by every own presence write since. */
  readonly #floors = new Map<number, number>();
  /** partition -> its purge floor (Store.purgeFloor), loaded with the presence floor. */
  readonly #purgeFloors = new Map<number, number>();
  /** The cap was hit with nothing idle to let go: logged once per crossing. */
  #overCapLogged = false;

  constructor(options: ActorRegistryOptions) {
    this.#o = options;
    this.dc = options.dc;
    this.graceMs = options.graceMs;
    this.visitorHash = new VisitorHash(options.visitorKey ?? DEFAULT_VISITOR_KEY);
  }

  // --- ActorHost ---------------------------------------------------------------------------------

  now(): number {
    return this.#o.clock.now();
  }

  monotonic(): number {
    return this.#o.clock.monotonic();
  }

  markDirty(actor: PageActor, rewrite?: boolean): void {
    this.#o.markDirty(actor, rewrite);
  }

  presenceFloor(partition: number): number {
    return this.#floors.get(partition) ?? 0;
  }

  presenceRaised(partition: number, p: number): void {
    if (p > (this.#floors.get(partition) ?? 0)) this.#floors.set(partition, p);
  }

  purgeFloor(partition: number): number {
    return this.#purgeFloors.get(partition) ?? 0;
  }

  /** A purge raised the partition's purge floor (the store's answer). */
  purgeRaised(partition: number, floor: number): void {
    if (floor > (this.#purgeFloors.get(partition) ?? 0)) this.#purgeFloors.set(partition, floor);
  }

  viewersChanged(actor: PageActor): void {
    if (this.#actors.get(actor.page) !== actor || actor.status !== "active") return;
    const { occupancy, isLive } = this.#o;
    actor.notePeak(actor.livePresence(VIEWERS_COUNTER, isLive ?? ALL_LIVE));
    occupancy?.observe(actor);
  }

  /** Every page in memory: its viewers may have moved (a DC went down or came back). */
  viewersChangedEverywhere(): void {
    for (const actor of this.#actors.values()) this.viewersChanged(actor);
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
    const actor = new PageActor(this, page, partition, settleUntil > this.monotonic() ? settleUntil : 0);
    this.#actors.set(page, actor);
    let inPartition = this.#byPartition.get(partition);
    if (inPartition === undefined) this.#byPartition.set(partition, (inPartition = new Set()));
    inPartition.add(actor);
    if (this.#actors.size > this.#o.maxActors && this.#actors.size >= this.#nextRoomScanAt) this.#makeRoom();
    this.#o.metrics.actors.set(this.#actors.size);
    const barrier = this.#loadBarriers.get(partition);
    (barrier === undefined
      ? this.#o.store.loadExcept(page, SERIES_PREFIXES)
      : barrier.then(() => this.#o.store.loadExcept(page, SERIES_PREFIXES))
    )
      .then((record) => actor.loaded(record))
      // A record the actor cannot take (an entry no replica may hold) fails the load like the
      // store failing: the page is refused and logged, and the process goes on.
      .then(undefined, (err: unknown) => {
        this.#logs.log(this.#o.logger, "error", { err, page }, "page load failed");
        this.#teardown(actor, "load_failed", err);
      });
    return actor;
  }

  /**
   * Every DC's entries of a page: from its actor when it is in memory, else straight from the store
   * (after any merge in flight on its partition). A read never brings a page into memory, so reads
   * of pages nobody views cost no state however many there are.
   */
  async read(page: string, partition: number): Promise<PageRecord> {
    if (this.#actors.has(page)) return this.run(page, partition, (actor) => actor.snapshot());
    await this.#loadBarriers.get(partition);
    return this.#o.store.loadExcept(page, SERIES_PREFIXES);
  }

  /** The page's actor if it is in memory (loading or active). */
  find(page: string): PageActor | undefined {
    return this.#actors.get(page);
  }

  /** The actors of a partition in memory (loading or active). */
  actorsIn(partition: number): PageActor[] {
    return [...(this.#byPartition.get(partition) ?? [])];
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

  /** Whether every page with viewers in any DC must have its actor here (occupancy webhooks). */
  get watchesOccupancy(): boolean {
    return this.#o.occupancy !== undefined;
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
    const settleUntil = this.monotonic() + this.#o.settleMs;
    this.#settleUntil.set(partition, settleUntil);
    this.#o.occupancy?.partitionServing(partition, settleUntil);
    // No page of the partition loads before its presence floor is known.
    this.holdLoads(partition, this.#loadFloor(partition));
    void this.#wakeLeftBehind(partition);
  }

  async #loadFloor(partition: number): Promise<void> {
    for (let retryMs = FLOOR_RETRY_MS; ; retryMs = Math.min(retryMs * 2, FLOOR_RETRY_MAX_MS)) {
      try {
        const { store } = this.#o;
        const [presence, purge] = await Promise.all([
          store.presenceFloor(partition),
          store.purgeFloor(partition),
        ]);
        this.presenceRaised(partition, presence);
        this.purgeRaised(partition, purge);
        return;
      } catch (err) {
        if (!this.#settleUntil.has(partition)) return;
        this.#o.logger.warn({ err, partition, retryMs }, "floors unreadable; pages wait for them");
        await sleep(this.#o.clock, retryMs);
      }
    }
  }

  /** Drops every actor of the partition: it was handed over (after a flush) or its lease was lost. */
  dropPartition(partition: number, reason: "partition_lost" | "partition_released"): void {
    // Read again from the store when the partition is served here again (partitionServing).
    this.#purgeFloors.delete(partition);
    for (const actor of this.actorsIn(partition)) this.#teardown(actor, reason);
    this.#settleUntil.delete(partition);
    this.#floors.delete(partition);
  }

  // --- time --------------------------------------------------------------------------------------

  /** Ticks every actor whose deadline has come by `now` (monotonic): graces end, settle windows close. */
  tick(now: number): void {
    // forEach, not for-of: no [actor, at] pair allocated per scheduled page on every sweep.
    this.#deadlines.forEach((at, actor) => {
      if (at > now) return;
      this.#deadlines.delete(actor);
      // A tick may schedule the actor's next deadline (the next lingering viewer).
      if (actor.status === "active") actor.tick(now);
    });
  }

  /**
   * The store reconnected after its connection dropped: it may have restarted from a file that lacks
   * its last second. Every page in memory writes this DC's entries again (max-merged, so nothing
   * moves back), so what the store lost does not stay lost once the page leaves memory.
   */
  rewriteOwn(): void {
    for (const actor of this.#actors.values()) if (actor.status === "active") actor.rewriteOwn();
  }

  /** Lets idle actors leave memory: no viewers, nothing to write, untouched for `passivateMs`. */
  passivateIdle(now: number): void {
    for (const actor of [...this.#actors.values()]) {
      if (this.#mayLeave(actor) && now - actor.lastActive >= this.#o.passivateMs)
        this.#teardown(actor, "passivated");
    }
    if (this.#actors.size <= this.#o.maxActors) this.#nextRoomScanAt = 0;
  }

  /**
   * Over the cap: the least recently used idle actors leave, down to nine tenths of it, so the
   * next few thousand pages do not each pay for a scan.
   */
  #makeRoom(): void {
    this.#nextRoomScanAt = 0;
    const target = Math.floor(this.#o.maxActors * CAP_HEADROOM);
    const idle = [...this.#actors.values()]
      .filter((a) => this.#mayLeave(a))
      .sort((a, b) => a.lastActive - b.lastActive);
    for (const actor of idle) {
      if (this.#actors.size <= target) break;
      this.#teardown(actor, "evicted");
    }
    if (this.#actors.size > this.#o.maxActors) {
      // Every actor is busy (pages with viewers always stay): scanning again for each new page
      // would cost O(actors) per page and stall the node. The next scan waits for a tenth of the
      // cap more, or for passivation to bring the count down.
      this.#nextRoomScanAt = this.#actors.size + Math.ceil(this.#o.maxActors * (1 - CAP_HEADROOM));
      if (!this.#overCapLogged)
        this.#o.logger.warn(
          { actors: this.#actors.size, max: this.#o.maxActors },
          "actors over the cap, all busy",
        );
      this.#overCapLogged = true;
    } else this.#overCapLogged = false;
  }

  /** Idle, and not kept for occupancy webhooks. */
  #mayLeave(actor: PageActor): boolean {
    return actor.isIdle && this.#o.occupancy?.keeps(actor) !== true;
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
    const inPartition = this.#byPartition.get(actor.partition);
    if (inPartition?.delete(actor) === true && inPartition.size === 0)
      this.#byPartition.delete(actor.partition);
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
    if (!this.#settleUntil.has(partition)) return;
    for (const ref of refs) {
      if (ref.dc === this.dc && isPresenceCounter(ref.counter)) this.get(ref.page, partition);
    }
  }
}
