import { dcUpdatesSubject, type Bus } from "@livecount/bus";
import { encodePageUpdate, encodePageUpdates } from "@livecount/protocol";
import type { PageRecord } from "@livecount/store";
import type { CounterMetrics } from "./counter_metrics.js";
import type { DurableUpdate } from "./replies.js";

export interface DurablePublisherOptions {
  readonly dc: string;
  readonly bus: Bus;
  readonly metrics: CounterMetrics;
  /** The page's subject (cached by its actor when in memory). */
  readonly subjectOf: (page: string, partition: number) => string;
  /** Logs a failure, at most so often per message (the writer's LogThrottle). */
  readonly logError: (err: unknown, msg: string, fields: Record<string, unknown>) => void;
}

/**
 * Publishes what the durable writer made durable: a page's entries to every DC, or pages' entries
 * to this DC's gateways only. A publish the bus refuses (past its max_payload: PayloadTooLargeError;
 * or the bus closing) costs the watchers this update, and nothing else: thrown on, it failed the
 * flush or merge it came from, which wrote every page of it again and failed the same way at every
 * try, the pages after it never published. Other DCs get what it carried by anti-entropy.
 */
export class DurablePublisher {
  readonly #o: DurablePublisherOptions;

  constructor(options: DurablePublisherOptions) {
    this.#o = options;
  }

  /**
   * One data center's entries of a page on the page's subject (every DC), or, for a `local` update,
   * on this DC's updates subject (its gateways only).
   */
  update(update: DurableUpdate, ts: number): void {
    const { page, partition, dc, counters } = update;
    if (update.local === true) {
      // fromEntries defines own properties: a counter named "__proto__" stays a counter.
      const entries = Object.fromEntries([...counters].map(([name, e]) => [name, { [dc]: e }]));
      this.local(partition, [[page, entries]], ts);
      return;
    }
    const data = encodePageUpdate({ type: "update", page, dc, counters, ts });
    this.#publish(this.#o.subjectOf(page, partition), data, page);
  }

  /** Pages' entries on this DC's updates subject: for its own gateways only. */
  local(partition: number, pages: ReadonlyArray<readonly [string, PageRecord]>, ts: number): void {
    this.#publish(dcUpdatesSubject(this.#o.dc, partition), encodePageUpdates(partition, pages, ts));
  }

  #publish(subject: string, data: Uint8Array, page?: string): void {
    try {
      this.#o.bus.publish(subject, data);
      this.#o.metrics.publishes.inc();
    } catch (err) {
      this.#o.metrics.publishFailures.inc();
      this.#o.logError(err, "update not published", page === undefined ? { subject } : { page });
    }
  }
}
