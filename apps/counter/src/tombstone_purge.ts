import { deletedCounterOf, tombstoneOf, type PurgedReply } from "@livecount/protocol";
import { LogThrottle, type Clock, type Logger, type TimerHandle } from "@livecount/runtime";
import { StaleFenceError, type Fence, type PurgeResult, type Store } from "@livecount/store";
import type { CounterMetrics } from "./counter_metrics.js";
import type { PageActor } from "./page_actor.js";

export interface TombstonePurgeOptions {
  readonly nodeId: string;
  readonly store: Store;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  /** The partitions this node may hold. */
  readonly partitions: () => readonly number[];
  /** The fence of a partition this node holds and serves, or undefined. */
  readonly servingFence: (partition: number) => Fence | undefined;
  /** Runs a step on the durable writer's commit chain (DurableWriter.serialized). */
  readonly onCommitChain: <T>(step: () => Promise<T>) => Promise<T>;
  /** The page's actor in memory, if any. */
  readonly actorOf: (page: string) => PageActor | undefined;
  /** The actors of a partition in memory. */
  readonly actorsIn: (partition: number) => readonly PageActor[];
  /** The store raised the partition's purge floor (ActorRegistry.purgeRaised). */
  readonly floorRaised: (partition: number, floor: number) => void;
  /**
   * Up to when every other DC is known to hold what this DC's store held of the partition
   * (Convergence.confirmedUntil): only tombstones every DC holds are purged.
   */
  readonly confirmedUntil: (partition: number) => number;
  /** How often partitions whose tombstones wait for that are looked at again. */
  readonly recheckMs: number;
}

/** Pages looked at per store call; a partition with more goes on in the same sweep. */
const PAGES_PER_CALL = 200;
/** First wait before memory is checked against the store again after a purge call failed; doubles up to the max. */
const RECONCILE_RETRY_MS = 500;
const RECONCILE_RETRY_MAX_MS = 30_000;

type Totals = Omit<PurgedReply, "type" | "node" | "before">;
type MutableTotals = { -readonly [K in keyof Totals]: Totals[K] };

/**
 * Purges tombstones: deleted counters, with their tombstones, whose tombstones last changed in this
 * DC's store before a time an operator asked for (POST /v1/admin/purge, `request`), in every
 * partition this node serves. The time travels in this node's DC heartbeats, so every counter node
 * of every DC that hears it purges its own partitions up to it as well (`heard`): each DC purges on
 * its own, which the purge floor makes safe (docs/architecture.md, "Purging tombstones").
 *
 * A tombstone is purged only once every other DC is known to hold it (their digests of the
 * partition's tombstone digests were equal since it last changed here, a grace ago: TombAgreements):
 * a DC that never got the delete would otherwise send the counter back as it was before it.
 * Partitions where some old enough tombstone waits for that are swept again, every `recheckMs`,
 * once the confirmation has moved on.
 *
 * Each store call runs on the commit chain, between increment batches and resets, so no change is
 * planned from entries that are leaving; actors in memory forget the purged counters in mailbox
 * order (after their load, if one is under way).
 */
export class TombstonePurge {
  readonly #o: TombstonePurgeOptions;
  #before = 0;
  #tail: Promise<unknown> = Promise.resolve();
  /**
   * Partition -> the cutoff it was last swept up to here. A partition is swept again when its cutoff
   * (`before`, or less while some DC is not yet known to hold its tombstones) moves past it, which
   * also covers partitions that came to this node since (a handover).
   */
  readonly #sweptTo = new Map<number, number>();
  #recheck: TimerHandle | undefined;
  readonly #logs = new LogThrottle();
  #stopped = false;

  constructor(options: TombstonePurgeOptions) {
    this.#o = options;
  }

  /** Epoch-ms: tombstones that changed before this are purged here (0: nobody asked). */
  get before(): number {
    return this.#before;
  }

  /** An operator asked: purges tombstones older than `olderThanMs` here, and asks every DC to. */
  async request(olderThanMs: number): Promise<PurgedReply> {
    this.#before = Math.max(this.#before, this.#o.clock.now() - olderThanMs);
    const before = this.#before;
    const totals = await this.#queue(before, this.#o.partitions());
    return { type: "purged", node: this.#o.nodeId, before, ...totals };
  }

  /** Another node (of any DC) asked, in its heartbeat: purges here up to `before` if that is news. */
  heard(before: number): void {
    if (before <= this.#before) return;
    this.#before = before;
    void this.#queue(before, this.#o.partitions());
  }

  stop(): void {
    this.#stopped = true;
    if (this.#recheck !== undefined) this.#o.clock.clearTimeout(this.#recheck);
    this.#recheck = undefined;
  }

  /**
   * Once anyone asked, looks every `recheckMs` at the partitions served here whose cutoff moved past
   * what they were swept up to: a confirmation came, or the partition is new here.
   */
  #scheduleRecheck(): void {
    if (this.#recheck !== undefined || this.#stopped || this.#before === 0) return;
    this.#recheck = this.#o.clock.setTimeout(() => {
      this.#recheck = undefined;
      // A partition no longer served here is swept again in full should it come back.
      for (const p of this.#sweptTo.keys())
        if (this.#o.servingFence(p) === undefined) this.#sweptTo.delete(p);
      const due = this.#o
        .partitions()
        .filter(
          (p) =>
            this.#o.servingFence(p) !== undefined &&
            Math.min(this.#before, this.#o.confirmedUntil(p)) > (this.#sweptTo.get(p) ?? -1),
        );
      const swept = due.length > 0 ? this.#queue(this.#before, due) : Promise.resolve();
      void swept.finally(() => this.#scheduleRecheck());
    }, this.#o.recheckMs);
  }

  /** Sweeps run one after the other; a request made during one gets a sweep of its own after it. */
  #queue(before: number, partitions: readonly number[]): Promise<Totals> {
    const sweep = this.#tail.then(() => this.#sweep(before, partitions));
    this.#tail = sweep.catch(() => undefined);
    return sweep;
  }

  async #sweep(before: number, partitions: readonly number[]): Promise<Totals> {
    const totals: MutableTotals = { pages: 0, counters: 0, kept: 0, failed: 0, waiting: 0 };
    for (const partition of partitions) {
      const cutoff = Math.min(before, this.#o.confirmedUntil(partition));
      if (this.#o.servingFence(partition) === undefined) continue;
      if (cutoff < before && (await this.#heldBack(partition, cutoff, before))) totals.waiting++;
      let offset: number | undefined = 0;
      while (offset !== undefined) {
        const fence = this.#o.servingFence(partition);
        if (fence === undefined) break;
        let result: PurgeResult;
        try {
          result = await this.#o.onCommitChain(() => this.#purgeSome(fence, cutoff, offset!));
        } catch (err) {
          // A stale fence: the partition moved on, and its new owner purges it when asked again.
          if (!(err instanceof StaleFenceError)) {
            totals.failed++;
            this.#o.logger.warn({ err, partition }, "tombstones not purged; purge again to go on");
            // The store may have purged before the answer was lost: memory must learn what it holds.
            void this.#reconcile(partition, RECONCILE_RETRY_MS);
          }
          break;
        }
        totals.pages += result.purged.length;
        for (const { counters } of result.purged) totals.counters += counters.length;
        totals.kept += result.kept;
        offset = result.next;
        // Swept through: looked at again only once its cutoff moves past this one.
        if (offset === undefined) this.#sweptTo.set(partition, cutoff);
      }
    }
    this.#scheduleRecheck();
    if (totals.counters > 0) {
      this.#o.metrics.tombstonesPurged.inc(totals.counters);
      // Once per 10 s at most, with how many purges it stands for (admin-key holders can ask often).
      const suppressed = this.#logs.admit("tombstones purged");
      if (suppressed !== undefined)
        this.#o.logger.info(
          { ...totals, before, ...(suppressed > 0 ? { suppressed } : {}) },
          "tombstones purged",
        );
    }
    return totals;
  }

  /**
   * After a purge call whose outcome is unknown: the partition's floor is read again, and actors in
   * memory (once loaded) forget the deleted counters they hold a purgeable copy of that the store no
   * longer holds, on the commit chain so no change is planned meanwhile. A tombstone in memory the
   * store lacks for another reason (another DC's delete not flushed yet) is no purgeable copy: its
   * counter still has the entry the delete cancelled. Retried until it succeeds or the partition is no
   * longer served here.
   */
  async #reconcile(partition: number, retryMs: number): Promise<void> {
    const { store, clock, logger } = this.#o;
    if (this.#o.servingFence(partition) === undefined) return;
    try {
      await this.#o.onCommitChain(async () => {
        this.#o.floorRaised(partition, await store.purgeFloor(partition));
        for (const actor of this.#o.actorsIn(partition)) {
          const candidates = await purgeableIn(actor);
          if (candidates.length === 0) continue;
          const stored = await store.load(actor.page);
          const gone = candidates.filter((c) => !Object.hasOwn(stored, tombstoneOf(c)));
          if (gone.length > 0)
            actor.run(
              (failure) => failure === undefined && actor.purged(gone.filter((c) => settledHere(actor, c))),
            );
        }
      });
    } catch (err) {
      logger.warn(
        { err, partition, retryMs },
        "memory not yet checked against the store after a failed purge",
      );
      clock.setTimeout(
        () => void this.#reconcile(partition, Math.min(retryMs * 2, RECONCILE_RETRY_MAX_MS)),
        retryMs,
      );
    }
  }

  /** Whether tombstones old enough wait for every DC to be known to hold them (the store's say). */
  async #heldBack(partition: number, cutoff: number, before: number): Promise<boolean> {
    try {
      return (await this.#o.store.countTombstonePages(partition, Math.max(-1, cutoff), before)) > 0;
    } catch {
      return true; // unknown: counted as waiting
    }
  }

  async #purgeSome(fence: Fence, before: number, offset: number): Promise<PurgeResult> {
    const result = await this.#o.store.purgeTombstones(fence, before, offset, PAGES_PER_CALL);
    this.#o.floorRaised(fence.partition, result.floor);
    for (const { page, counters } of result.purged) {
      const actor = this.#o.actorOf(page);
      // A loading actor may have read the counters before they left: it forgets them once loaded.
      actor?.run((failure) => failure === undefined && actor.purged(counters));
    }
    return result;
  }
}

/** The deleted counters an actor holds a purgeable copy of, once it is loaded (none if it closed). */
function purgeableIn(actor: PageActor): Promise<string[]> {
  return new Promise((resolve) =>
    actor.run((failure) =>
      resolve(
        failure !== undefined
          ? []
          : Object.keys(actor.snapshot())
              .flatMap((name) => deletedCounterOf(name) ?? [])
              .filter((c) => settledHere(actor, c)),
      ),
    ),
  );
}

/**
 * A settled delete in memory that the store holds as memory does: nothing of it waits for a flush
 * (another DC's delete merged but not written yet is not the store's to have purged).
 */
function settledHere(actor: PageActor, counter: string): boolean {
  return actor.purgeableAsStored(counter);
}
