import type { Clock, Logger } from "@livecount/runtime";
import type { EntryWrite, Fence, Store } from "@livecount/store";
import type { CounterMetrics } from "./counter_metrics.js";

export interface RemoteWritesOptions {
  readonly store: Store;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  /** The store found the partition's fence stale: its lease is lost. */
  readonly lost: (fence: Fence) => void;
}

/**
 * Other DCs' entries of pages not in memory, as they arrived on the page subjects, persisted with a
 * max-merge under the partition's fence and not published again (every watcher got them from the
 * same subject). Writes of one turn and partition share a round trip.
 */
export class RemoteWrites {
  readonly #o: RemoteWritesOptions;
  /** Entries waiting for this turn's write, per partition. */
  readonly #pending = new Map<number, { fence: Fence; writes: EntryWrite[]; done: Promise<void> }>();

  constructor(options: RemoteWritesOptions) {
    this.#o = options;
  }

  /** Resolves once the turn's write of the partition has ended (stored, or logged as not stored). */
  write(fence: Fence, writes: readonly EntryWrite[]): Promise<void> {
    const pending = this.#pending.get(fence.partition);
    if (pending !== undefined && pending.fence.epoch === fence.epoch) {
      pending.writes.push(...writes);
      return pending.done;
    }
    const batch = { fence, writes: [...writes] };
    const done = new Promise<void>((resolve) =>
      this.#o.clock.defer(() => {
        if (this.#pending.get(fence.partition)?.writes === batch.writes)
          this.#pending.delete(fence.partition);
        resolve(this.#write(batch.fence, batch.writes));
      }),
    );
    this.#pending.set(fence.partition, { ...batch, done });
    return done;
  }

  async #write(fence: Fence, writes: readonly EntryWrite[]): Promise<void> {
    try {
      this.#o.metrics.storeWrites.inc();
      if ((await this.#o.store.write([{ fence, writes }])).length > 0) this.#o.lost(fence);
    } catch (err) {
      // Anti-entropy repairs what is not stored here: the other DC's store still holds it.
      this.#o.logger.warn({ err, partition: fence.partition }, "remote entries not stored");
    }
  }
}
