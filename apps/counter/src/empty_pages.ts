import type { Clock, Logger, TimerHandle } from "@livecount/runtime";
import { StaleFenceError, type Fence, type Store } from "@livecount/store";
import type { CounterMetrics } from "./counter_metrics.js";

export interface EmptyPagesOptions {
  readonly store: Store;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  /** LIVECOUNT_EMPTY_PAGE_TTL_S, in ms. */
  readonly ttlMs: number;
  /** The partitions this node may hold. */
  readonly partitions: () => readonly number[];
  /** The fence of a partition this node holds and serves, or undefined. */
  readonly servingFence: (partition: number) => Fence | undefined;
  /** Pages the store just removed (an actor in memory forgets what it noted of their time buckets). */
  readonly removed?: (pages: readonly string[]) => void;
}

/** Pages (or window buckets) removed per store call; a partition with more goes on in the same sweep. */
const PAGES_PER_CALL = 500;
/** Window buckets expire on minute boundaries (protocol windows.ts). */
const BUCKET_MS = 60_000;
/** How long after a boundary the bucket sweep runs: past small clock differences between DCs. */
const BUCKET_SWEEP_DELAY_MS = 1_000;
/** Sweeps run every quarter of the TTL, within these bounds. */
const MIN_PERIOD_MS = 1_000;
const MAX_PERIOD_MS = 60_000;

/**
 * Empty pages leave no trace: a page with no viewer anywhere and no durable counter, empty for
 * `ttlMs`, is removed from the store, the listings and every index of its partition by the
 * partition's owner in each DC (memory lets it go by passivation). Removal is safe for convergence:
 * what such a page holds are zero presence entries, which digests leave out, and its own presence
 * entry restarts at the partition's presence floor when a viewer comes back, above any copy another
 * DC may still hold (docs/architecture.md, "Empty pages").
 */
export class EmptyPages {
  readonly #o: EmptyPagesOptions;
  #timer: TimerHandle | undefined;
  #bucketTimer: TimerHandle | undefined;
  #running = false;

  constructor(options: EmptyPagesOptions) {
    this.#o = options;
  }

  start(): void {
    this.#running = true;
    this.#schedule();
    this.#scheduleBuckets();
  }

  stop(): void {
    this.#running = false;
    if (this.#timer !== undefined) this.#o.clock.clearTimeout(this.#timer);
    if (this.#bucketTimer !== undefined) this.#o.clock.clearTimeout(this.#bucketTimer);
  }

  /** Removes every page of the partitions served here that has been empty for the TTL. */
  async sweep(): Promise<number> {
    let removed = 0;
    const failed = new SweepFailures();
    const emptySince = this.#o.clock.now() - this.#o.ttlMs;
    for (const partition of this.#o.partitions()) {
      for (;;) {
        const fence = this.#o.servingFence(partition);
        if (fence === undefined) break;
        let pages: string[];
        try {
          pages = await this.#o.store.removeEmptyPages(fence, emptySince, PAGES_PER_CALL);
        } catch (err) {
          failed.add(err);
          break;
        }
        removed += pages.length;
        if (pages.length > 0) this.#o.removed?.(pages);
        if (pages.length < PAGES_PER_CALL) break;
      }
    }
    failed.log(this.#o.logger, "empty pages");
    if (removed > 0) {
      this.#o.metrics.emptyPagesRemoved.inc(removed);
      this.#o.logger.info({ pages: removed }, "empty pages removed");
    }
    return removed;
  }

  /**
   * Removes the window buckets of the partitions served here that no window reaches any more (a page
   * left empty by them goes with the next page sweep).
   */
  async sweepBuckets(): Promise<number> {
    let removed = 0;
    const failed = new SweepFailures();
    for (const partition of this.#o.partitions())
      removed += await this.#removeExpiredBuckets(partition, failed);
    failed.log(this.#o.logger, "window buckets");
    return removed;
  }

  async #removeExpiredBuckets(partition: number, failed: SweepFailures): Promise<number> {
    let total = 0;
    for (;;) {
      const fence = this.#o.servingFence(partition);
      if (fence === undefined) return total;
      let removed: number;
      try {
        removed = await this.#o.store.removeExpiredBuckets(fence, PAGES_PER_CALL);
      } catch (err) {
        failed.add(err);
        return total;
      }
      this.#o.metrics.windowBucketsRemoved.inc(removed);
      total += removed;
      if (removed < PAGES_PER_CALL) return total;
      // A day's registers expire at once: let sockets, heartbeats and leases run between calls.
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  #schedule(): void {
    const periodMs = Math.min(MAX_PERIOD_MS, Math.max(MIN_PERIOD_MS, Math.floor(this.#o.ttlMs / 4)));
    this.#timer = this.#o.clock.setTimeout(() => {
      void this.sweep().finally(() => {
        if (this.#running) this.#schedule();
      });
    }, periodMs);
  }

  /**
   * Buckets expire on minute boundaries, the same instants in every DC: sweeping right after each
   * one keeps the time DCs' digests differ by buckets one removed and the other not yet to the
   * clock skew and the sweep itself, so anti-entropy rarely sees it.
   */
  #scheduleBuckets(): void {
    const now = this.#o.clock.now();
    const next = Math.floor(now / BUCKET_MS) * BUCKET_MS + BUCKET_MS + BUCKET_SWEEP_DELAY_MS;
    this.#bucketTimer = this.#o.clock.setTimeout(() => {
      void this.sweepBuckets().finally(() => {
        if (this.#running) this.#scheduleBuckets();
      });
    }, next - now);
  }
}

/**
 * The partitions a sweep could not sweep, said in one line at its end: while the store is down every
 * partition fails, and a line each (256 by default, a stack each) would bury the outage's own lines.
 */
class SweepFailures {
  #partitions = 0;
  #first: unknown;

  add(err: unknown): void {
    // A stale fence: the partition is moving to another node, which sweeps it from now on.
    if (err instanceof StaleFenceError) return;
    if (this.#partitions++ === 0) this.#first = err;
  }

  log(logger: Logger, what: string): void {
    if (this.#partitions > 0)
      logger.warn(
        { err: this.#first, partitions: this.#partitions },
        `${what} not removed; the next sweep tries again`,
      );
  }
}
