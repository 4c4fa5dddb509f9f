/**
 * Fire-and-forget changes: `queue(page, counter, change)` adds a delta to the open item of that
 * (page, counter); when the window closes every open item is sealed with its own idempotency key
 * and sent in batches. A sealed item never changes again, so every retry of it carries the same
 * key and the same amount and the server counts it once. Memory is bounded by distinct counters,
 * not by calls: ten thousand calls on one counter within a window are one item.
 */
import {
  PartialFailureError,
  QueueFullError,
  type ChangeItem,
  type FailedItem,
  LivecountError,
} from "./errors.js";
import { newIdempotencyKey } from "./ids.js";
import type { CounterValue } from "./types.js";

export interface QueueOptions {
  /**
   * How long, in milliseconds, deltas of one counter coalesce before they are sent. The first
   * `queue()` after a quiet period opens the window. Default 50.
   */
  readonly windowMs?: number;
  /** Items per request to `POST /v1/counters/increment`. Default 100. */
  readonly maxBatchItems?: number;
  /**
   * Items (distinct page/counter pairs in the open window, plus sealed items not yet durable)
   * the queue holds before `queue()` throws {@link QueueFullError}. Default 10000.
   */
  readonly maxPendingItems?: number;
  /** Batch requests in flight at once. Default 4. */
  readonly maxConcurrentBatches?: number;
}

export const QUEUE_DEFAULTS = Object.freeze({
  windowMs: 50,
  maxBatchItems: 100,
  maxPendingItems: 10_000,
  maxConcurrentBatches: 4,
});

/** Largest amount one item may carry (the server's limit per change); bigger sums are split. */
export const MAX_CHANGE = 1_000_000_000;

/** Sends items, retrying with the same keys; resolves with each item's value or final error, in order. */
export type SendChanges = (items: readonly ChangeItem[]) => Promise<Array<CounterValue | LivecountError>>;

interface Sealed {
  readonly item: ChangeItem;
  /** Resolves once the item is durable (undefined) or has failed for good. */
  readonly done: Promise<FailedItem | undefined>;
  readonly settle: (failure: FailedItem | undefined) => void;
}

export class ChangeQueue {
  readonly #o: Required<QueueOptions>;
  readonly #send: SendChanges;
  readonly #onError: (error: LivecountError) => void;
  /** Deltas of the current window by "counter page" (a space occurs in neither). */
  readonly #open = new Map<string, { page: string; counter: string; change: number }>();
  /** Sealed items waiting for a free batch slot. */
  readonly #ready: Sealed[] = [];
  /** Sealed items not yet settled (ready or in flight). */
  readonly #unsettled = new Set<Sealed>();
  /** Failures not yet reported by a flush(). */
  #failures: FailedItem[] = [];
  #inFlight = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(options: QueueOptions, send: SendChanges, onError: (error: LivecountError) => void) {
    const o = { ...QUEUE_DEFAULTS, ...options };
    if (!(o.windowMs >= 0)) throw new RangeError("queue.windowMs must be >= 0");
    for (const k of ["maxBatchItems", "maxPendingItems", "maxConcurrentBatches"] as const)
      if (!Number.isInteger(o[k]) || o[k] < 1) throw new RangeError(`queue.${k} must be an integer >= 1`);
    this.#o = o;
    this.#send = send;
    this.#onError = onError;
  }

  /** Items held: open ones plus sealed ones not yet durable. */
  get pending(): number {
    return this.#open.size + this.#unsettled.size;
  }

  /** Adds `change` to the open item of (page, counter). Arguments are already validated. */
  add(page: string, counter: string, change: number): void {
    const key = `${counter} ${page}`;
    const open = this.#open.get(key);
    if (open !== undefined && Math.abs(open.change + change) <= MAX_CHANGE) {
      open.change += change;
    } else {
      if (this.pending >= this.#o.maxPendingItems) throw new QueueFullError(this.#o.maxPendingItems);
      // An item over the limit is sealed as it is; the rest starts a new one.
      if (open !== undefined) this.#seal(open);
      this.#open.set(key, { page, counter, change });
    }
    this.#timer ??= setTimeout(() => this.#closeWindow(), this.#o.windowMs);
  }

  /**
   * Seals and sends everything queued so far and resolves once all of it is durable. Rejects with
   * a {@link PartialFailureError} listing every item that failed since the previous flush (each
   * also went to `onError`), keys included, so they can be sent again exactly once.
   */
  async flush(): Promise<void> {
    this.#closeWindow();
    await Promise.all([...this.#unsettled].map((s) => s.done));
    const failures = this.#failures;
    this.#failures = [];
    if (failures.length > 0) throw new PartialFailureError(failures, "queued changes");
  }

  #closeWindow(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const open of this.#open.values()) this.#seal(open);
    this.#open.clear();
    this.#pump();
  }

  #seal(open: { page: string; counter: string; change: number }): void {
    // Deltas that cancelled out need no request at all.
    if (open.change === 0) return;
    let settle!: (failure: FailedItem | undefined) => void;
    const done = new Promise<FailedItem | undefined>((resolve) => (settle = resolve));
    const sealed: Sealed = {
      item: { page: open.page, counter: open.counter, change: open.change, id: newIdempotencyKey() },
      done,
      settle,
    };
    this.#unsettled.add(sealed);
    this.#ready.push(sealed);
  }

  #pump(): void {
    while (this.#inFlight < this.#o.maxConcurrentBatches && this.#ready.length > 0)
      void this.#sendBatch(this.#ready.splice(0, this.#o.maxBatchItems));
  }

  async #sendBatch(batch: Sealed[]): Promise<void> {
    this.#inFlight++;
    const failed: FailedItem[] = [];
    try {
      let results: Array<CounterValue | LivecountError>;
      try {
        results = await this.#send(batch.map((s) => s.item));
      } catch (err) {
        const error =
          err instanceof LivecountError
            ? err
            : new LivecountError("internal", "sending queued changes failed", {
                cause: err,
                retryable: false,
              });
        results = batch.map(() => error);
      }
      batch.forEach((s, i) => {
        const r = results[i];
        const failure = r instanceof LivecountError ? { item: s.item, error: r } : undefined;
        if (failure !== undefined) failed.push(failure);
        this.#unsettled.delete(s);
        s.settle(failure);
      });
    } finally {
      this.#inFlight--;
      if (failed.length > 0) {
        this.#failures.push(...failed);
        try {
          this.#onError(new PartialFailureError(failed, "queued changes"));
        } catch {
          // A throwing error handler must not stop the queue.
        }
      }
      this.#pump();
    }
  }
}
