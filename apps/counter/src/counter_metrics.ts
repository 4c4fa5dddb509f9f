import { Counter, Gauge, Histogram, type Registry } from "prom-client";

/** A counter node's Prometheus metrics, registered on the process's registry. */
export class CounterMetrics {
  readonly presenceOps: Counter;
  readonly stalePresence: Counter;
  readonly increments: Counter<"outcome">;
  readonly resets: Counter<"kind" | "outcome">;
  readonly storeRegressions: Counter;
  readonly flushes: Counter;
  readonly flushFailures: Counter;
  readonly storeWrites: Counter;
  readonly publishes: Counter;
  readonly publishFailures: Counter;
  readonly forwards: Counter;
  readonly gatewayExpiries: Counter;
  readonly gatewayRestarts: Counter;
  readonly actors: Gauge;
  readonly partitions: Gauge;
  readonly flushSeconds: Histogram;
  readonly antiEntropy: Counter<"step">;
  readonly antiEntropyStalls: Counter;
  readonly antiEntropyPages: Counter<"direction">;
  readonly antiEntropyBytes: Counter;
  readonly partitionsBootstrapped: Gauge;
  readonly emptyPagesRemoved: Counter;
  readonly windowBucketsRemoved: Counter;
  readonly tombstonesPurged: Counter;
  readonly replicationLag: Gauge<"dc">;
  readonly keysAcrossDcs: Counter<"outcome">;
  readonly keysHeld: Gauge;

  /** `partitionsOwned` is read at every scrape: leases are taken and lost by background cycles too. */
  constructor(registry: Registry, sources: { partitionsOwned(): number; partitionsBootstrapped(): number }) {
    const registers = [registry];
    this.presenceOps = new Counter({
      name: "livecount_counter_presence_ops_total",
      help: "Presence operations applied",
      registers,
    });
    this.stalePresence = new Counter({
      name: "livecount_counter_presence_stale_total",
      help: "Presence requests dropped as sent over a bus connection their gateway has replaced since (held by a NATS server and passed on late)",
      registers,
    });
    this.increments = new Counter({
      name: "livecount_counter_increments_total",
      help: "Publisher increments by outcome",
      labelNames: ["outcome"],
      registers,
    });
    this.storeRegressions = new Counter({
      name: "livecount_counter_store_regressions_total",
      help: "Publisher changes the store answered with an entry below what the owner had counted (it lost writes); the owner's count was kept",
      registers,
    });
    this.resets = new Counter({
      name: "livecount_counter_resets_total",
      help: "Publisher resets and deletes by kind and outcome",
      labelNames: ["kind", "outcome"],
      registers,
    });
    this.flushes = new Counter({
      name: "livecount_counter_flushes_total",
      help: "Flushes of dirty pages (persist then publish)",
      registers,
    });
    this.flushFailures = new Counter({
      name: "livecount_counter_flush_failures_total",
      help: "Flushes that failed and will be retried",
      registers,
    });
    this.storeWrites = new Counter({
      name: "livecount_counter_store_round_trips_total",
      help: "Store round trips for entries and increments",
      registers,
    });
    this.publishes = new Counter({
      name: "livecount_counter_updates_published_total",
      help: "Page updates published",
      registers,
    });
    this.publishFailures = new Counter({
      name: "livecount_counter_update_publish_failures_total",
      help: "Page updates made durable that the bus refused (too large for its max_payload, or closing)",
      registers,
    });
    this.forwards = new Counter({
      name: "livecount_counter_forwards_total",
      help: "Requests forwarded to the page's owner",
      registers,
    });
    this.gatewayExpiries = new Counter({
      name: "livecount_counter_gateway_expiries_total",
      help: "Gateways whose lease lapsed",
      registers,
    });
    this.gatewayRestarts = new Counter({
      name: "livecount_counter_gateway_restarts_total",
      help: "Gateway incarnations released because a later one of their node id was heard and they missed a heartbeat",
      registers,
    });
    this.actors = new Gauge({ name: "livecount_counter_actors", help: "Page actors in memory", registers });
    this.partitions = new Gauge({
      name: "livecount_counter_partitions_owned",
      help: "Partitions whose lease this node holds",
      registers,
      collect() {
        this.set(sources.partitionsOwned());
      },
    });
    this.antiEntropy = new Counter({
      name: "livecount_counter_anti_entropy_steps_total",
      help: "Anti-entropy messages sent, by step (summary, buckets, entries)",
      labelNames: ["step"],
      registers,
    });
    this.antiEntropyStalls = new Counter({
      name: "livecount_counter_anti_entropy_stalls_total",
      help: "Anti-entropy transfers driven here that went silent and were compared again",
      registers,
    });
    this.antiEntropyPages = new Counter({
      name: "livecount_counter_anti_entropy_pages_total",
      help: "Pages moved by anti-entropy: sent, received, and changed here by what was received",
      labelNames: ["direction"],
      registers,
    });
    this.antiEntropyBytes = new Counter({
      name: "livecount_counter_anti_entropy_bytes_sent_total",
      help: "Bytes of anti-entropy messages this node sent to other DCs",
      registers,
    });
    this.emptyPagesRemoved = new Counter({
      name: "livecount_counter_empty_pages_removed_total",
      help: "Pages removed after being empty (no viewer anywhere, no durable counter) for the TTL",
      registers,
    });
    this.windowBucketsRemoved = new Counter({
      name: "livecount_counter_window_buckets_removed_total",
      help: "Window bucket entries removed once no window reaches them (a day after their minute)",
      registers,
    });
    this.tombstonesPurged = new Counter({
      name: "livecount_counter_tombstones_purged_total",
      help: "Deleted counters purged with their tombstones (POST /v1/admin/purge, in any DC)",
      registers,
    });
    this.partitionsBootstrapped = new Gauge({
      name: "livecount_counter_partitions_bootstrapped",
      help: "Partitions held that learned their state (serving); below partitions_owned while bootstrapping",
      registers,
      collect() {
        this.set(sources.partitionsBootstrapped());
      },
    });
    this.keysAcrossDcs = new Counter({
      name: "livecount_counter_idempotency_keys_across_dcs_total",
      help: "Idempotency keys of changes answered here sent to other DCs (sent, or unsent when the publish failed; resent to a DC that missed them; lost: dropped past LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS before every DC acknowledged them), and other DCs' keys stored here (stored), already live here (kept), dropped past LIVECOUNT_IDEMPOTENCY_IMPORT_MAX_KEYS waiting or at a stop (dropped), malformed, or failed",
      labelNames: ["outcome"],
      registers,
    });
    this.keysHeld = new Gauge({
      name: "livecount_counter_idempotency_keys_held",
      help: "Idempotency keys this node sent that it holds until every other DC acknowledged them (at most LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS): a cut of the link makes it grow",
      registers,
    });
    this.replicationLag = new Gauge({
      name: "livecount_counter_replication_lag_seconds",
      help: "Age of the latest page update from a remote data center when it arrived (its owner's clock to ours)",
      labelNames: ["dc"],
      registers,
    });
    this.flushSeconds = new Histogram({
      name: "livecount_counter_flush_seconds",
      help: "Duration of a flush",
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers,
    });
  }
}
