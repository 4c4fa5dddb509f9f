import { Counter, Gauge, type Registry } from "prom-client";

/** Occupancy webhooks' Prometheus metrics; registered only by a node that sends webhooks. */
export class WebhookMetrics {
  readonly events: Counter<"type">;
  readonly deliveries: Counter<"result">;
  readonly failures: Counter<"reason">;
  readonly retries: Counter;
  readonly dropped: Counter<"reason">;
  readonly queued: Gauge;

  /** `queued` is read at every scrape. */
  constructor(registry: Registry, sources: { queued(): number }) {
    const registers = [registry];
    this.events = new Counter({
      name: "livecount_counter_webhook_events_total",
      help: "Occupancy events created, by type",
      labelNames: ["type"],
      registers,
    });
    this.deliveries = new Counter({
      name: "livecount_counter_webhook_deliveries_total",
      help: "Events that left the queue: delivered (2xx) or gave_up (failed past the max age)",
      labelNames: ["result"],
      registers,
    });
    this.failures = new Counter({
      name: "livecount_counter_webhook_failures_total",
      help: "Delivery attempts that failed, by reason (network, timeout, status)",
      labelNames: ["reason"],
      registers,
    });
    this.retries = new Counter({
      name: "livecount_counter_webhook_retries_total",
      help: "Failed attempts scheduled again after a backoff",
      registers,
    });
    this.dropped = new Counter({
      name: "livecount_counter_webhook_dropped_total",
      help: "Events dropped undelivered: queue_full (past LIVECOUNT_WEBHOOK_MAX_QUEUED) or shutdown",
      labelNames: ["reason"],
      registers,
    });
    this.queued = new Gauge({
      name: "livecount_counter_webhook_queued",
      help: "Events waiting for delivery, the ones being sent included",
      registers,
      collect() {
        this.set(sources.queued());
      },
    });
  }
}
