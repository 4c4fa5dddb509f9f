import {
  BUS_SILENCE_HEARTBEATS,
  HEARTBEATS_PER_LEASE,
  readClusterConfig,
  type ClusterConfig,
} from "@livecount/cluster";
import { ConfigError, readFlag, readInt, type Env } from "@livecount/runtime";
import { readWebhookConfig, type WebhookConfig } from "./webhook_config.js";

/** A counter node's settings; each documented with its variable, default and reason. */
export interface CounterConfig extends ClusterConfig {
  /** LIVECOUNT_PORT: health, readiness and metrics over HTTP. Default 8081 (8080 is the gateway's). */
  readonly port: number;
  /**
   * LIVECOUNT_OPS_MAX_CONNECTIONS: connections the health and metrics port holds at once; more are
   * closed as they come. Default 1024: probes and scrapers use a few, and the node's links to NATS
   * and Redis keep their file descriptors whatever reaches the port (the limit here is 20,000).
   */
  readonly opsMaxConnections: number;
  /** LIVECOUNT_PARTITION_LEASE_MS: a partition owner that stops renewing loses it after this. Default 8000. */
  readonly partitionLeaseMs: number;
  /** LIVECOUNT_PASSIVATE_MS: an actor with no viewers and nothing pending leaves memory after this. Default 60000. */
  readonly passivateMs: number;
  /** LIVECOUNT_IDEMPOTENCY_TTL_S: how long an increment's idempotency key is remembered. Default 86400. */
  readonly idempotencyTtlMs: number;
  /**
   * LIVECOUNT_IDEMPOTENCY_MEMORY_MS: how long (of the store answering) the owner also keeps an
   * answered key in memory (recent_keys.ts), to write it back to a Redis that restarted, so a retry
   * counts once even if Redis's machine crashed before its append file reached the disk. Default
   * 3000: Redis writes the file every second and postpones a write up to another while the disk is
   * busy; of a silence between two answers a sixth of this counts at most (recent_keys.ts), so an
   * outage keeps what it may have lost.
   */
  readonly idempotencyMemoryMs: number;
  /**
   * LIVECOUNT_IDEMPOTENCY_MEMORY_KEYS: at most this many keys kept so, the oldest forgotten first.
   * Default 100,000: 3 s of 33,000 changes a second on one node, above the hot-page benchmark's
   * rate; 390 bytes of heap each with the request and answer kept, 39 MB at the cap
   * (loadtest/bench/key_memory.js).
   */
  readonly idempotencyMemoryKeys: number;
  /**
   * LIVECOUNT_IDEMPOTENCY_ACROSS_DCS: send the keys of changes answered here (applied, or replayed by
   * the store) to the other DCs, and store theirs, so a retry that lands in another DC counts once
   * (key_replication.ts). Default on; off saves, per change, about 150 bytes of link, one key in each
   * other DC's Redis, 5 to 10 µs of the sending node's CPU (holding what it sent included) and 20
   * to 25 of a receiving node's (30 to 40 on Redis Cluster: `loadtest/bench/key_import.js`).
   */
  readonly idempotencyAcrossDcs: boolean;
  /**
   * LIVECOUNT_IDEMPOTENCY_IMPORT_MAX_KEYS: other DCs' keys waiting for this node's store, at most;
   * past it new ones are dropped (their retries here may count again); 0 stores none. Default
   * 100,000: 5 s of 20,000 changes a second in the other DCs; 354 bytes of heap each (decoded from
   * messages of 1,000 keys, a UUID key and a 30-character page: `loadtest/bench/key_import.js`),
   * 35 MB at the cap.
   */
  readonly idempotencyImportMaxKeys: number;
  /**
   * LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS: keys this node sent that it holds until every other DC
   * acknowledged them, to send again to one that missed them (a cut of the link: held_keys.ts); past
   * it the oldest go (counted lost); 0 holds none. Default 100,000: while the link carries, keys are
   * held a round trip and a store call (a fraction of a second); 100,000 is about a 16 s cut at 6,000
   * changes a second here, or the last 100,000 of a longer one; held as the messages sent, 275 to
   * 638 bytes a key (many keys a message to one: `loadtest/bench/key_import.js`), 28 to 64 MB at
   * the cap.
   */
  readonly idempotencyResendMaxKeys: number;
  /**
   * LIVECOUNT_MAX_COUNTERS_PER_PAGE: counters (likes, reactions, badges) one page may hold; a change
   * to a new one past it is refused. Default 256: every count frame and read of the page carries all
   * of them (256 short names are about 8 KB, a frame a slow socket can queue several of inside its
   * 64 KiB), where a page needs tens. At most 2048: a page's entries travel whole on the bus (a read
   * of the page, its updates): with 15,000 counters of the longest names one DC's entries alone
   * passed NATS's default 1 MiB max_payload, and the page's reads timed out (504); with 2048 a raw
   * read of one DC's entries was 182 KB of JSON, so five DCs' stay under 1 MiB on the bus
   * (test/publishers/counter_cap.test.ts holds 2048 over NATS); a page past NATS's limit all the
   * same costs only its own reads and updates (oversized_updates.test.ts). Its count frames then
   * pass 64 KiB: raise LIVECOUNT_MAX_BACKPRESSURE_BYTES on the gateways with it. A deleted counter
   * counts until the purge removes it. The owner checks what its DC knows: counters created in other DCs at the
   * same time (or during a cut) can take a page past it, by at most the cap per DC.
   */
  readonly maxCountersPerPage: number;
  /**
   * LIVECOUNT_MAX_ACTORS: page actors one node keeps in memory before the least recently used idle
   * ones leave early. Default 100000: 100 to 200 MB of idle actors (1 KB of heap for a page of likes,
   * 2 KB once it has had viewers: loadtest/bench/actor_memory.js). Pages with viewers always stay.
   */
  readonly maxActors: number;
  /**
   * LIVECOUNT_EMPTY_PAGE_TTL_S: a page with no viewer anywhere and no durable counter leaves the
   * store and the listings once it has been so for this long. Default 3600: a page visited now and
   * then keeps its history, a flood of made-up page ids is gone within the hour.
   */
  readonly emptyPageTtlMs: number;
  /**
   * LIVECOUNT_WEBHOOK_*: occupancy webhooks, sent by each page's owner (docs/protocol.md,
   * "Webhooks"); every setting with its default and reason in webhook_config.ts. Absent (no
   * LIVECOUNT_WEBHOOK_URL): none. A URL without a secret of at least 32 characters refuses to start.
   */
  readonly webhook: WebhookConfig | undefined;
  /**
   * LIVECOUNT_VISITOR_KEY: the key of the hash that places viewer ids in unique-visitor registers.
   * Set it to the same secret (16 characters or more) in every DC: with the default, which anyone
   * can read here, a script could pick viewer ids that each fill a register and inflate the estimate.
   */
  readonly visitorKey: string;
  /**
   * LIVECOUNT_FLUSH_MAX_WRITES: about the most entries one flush writes to the store (it takes whole
   * partitions, so the last may pass it); the rest are flushed next, at once. Default 20000: some
   * 0.6 s of a loaded Redis on the 2-core VM, well inside the 5 s command timeout even at a third
   * of that speed, and a few thousand busy pages per flush.
   */
  readonly flushMaxWrites: number;
  /**
   * LIVECOUNT_AE_MERGES_IN_FLIGHT: anti-entropy merges a node sends its store at once. Default 8:
   * enough queued that Redis (one script at a time) never waits for the node between two, few
   * enough that the last waits well inside the 5 s command timeout; unbounded, a heal's hundreds of
   * page chunks queued in Redis until the last timed out (and were merged twice).
   */
  readonly mergesInFlight: number;
  /** Derived: after taking a partition over, how long gateways get to resync presence before `viewers` moves. */
  readonly settleMs: number;
  /** Derived: how often lingering viewers and gateway leases are checked. */
  readonly sweepMs: number;
}

/** The most LIVECOUNT_MAX_COUNTERS_PER_PAGE may be (CounterConfig.maxCountersPerPage says why). */
export const MAX_COUNTERS_PER_PAGE = 2048;

export function readCounterConfig(env: Env): CounterConfig {
  const cluster = readClusterConfig(env);
  return {
    ...cluster,
    port: readInt(env, "LIVECOUNT_PORT", 8081, { min: 0, max: 65535 }),
    opsMaxConnections: readInt(env, "LIVECOUNT_OPS_MAX_CONNECTIONS", 1024, { min: 1, max: 100_000 }),
    partitionLeaseMs: readInt(env, "LIVECOUNT_PARTITION_LEASE_MS", 8000, { min: 1000 }),
    passivateMs: readInt(env, "LIVECOUNT_PASSIVATE_MS", 60000, { min: 1000 }),
    idempotencyTtlMs: readInt(env, "LIVECOUNT_IDEMPOTENCY_TTL_S", 86400, { min: 1 }) * 1000,
    idempotencyMemoryMs: readInt(env, "LIVECOUNT_IDEMPOTENCY_MEMORY_MS", 3_000, { min: 0, max: 60_000 }),
    idempotencyMemoryKeys: readInt(env, "LIVECOUNT_IDEMPOTENCY_MEMORY_KEYS", 100_000, { min: 0 }),
    idempotencyAcrossDcs: readFlag(env, "LIVECOUNT_IDEMPOTENCY_ACROSS_DCS", true),
    idempotencyImportMaxKeys: readInt(env, "LIVECOUNT_IDEMPOTENCY_IMPORT_MAX_KEYS", 100_000, { min: 0 }),
    idempotencyResendMaxKeys: readInt(env, "LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS", 100_000, { min: 0 }),
    maxCountersPerPage: readInt(env, "LIVECOUNT_MAX_COUNTERS_PER_PAGE", 256, {
      min: 1,
      max: MAX_COUNTERS_PER_PAGE,
    }),
    maxActors: readInt(env, "LIVECOUNT_MAX_ACTORS", 100_000, { min: 100 }),
    flushMaxWrites: readInt(env, "LIVECOUNT_FLUSH_MAX_WRITES", 20_000, { min: 100 }),
    mergesInFlight: readInt(env, "LIVECOUNT_AE_MERGES_IN_FLIGHT", 8, { min: 1, max: 64 }),
    emptyPageTtlMs: readInt(env, "LIVECOUNT_EMPTY_PAGE_TTL_S", 3600, { min: 1 }) * 1000,
    webhook: readWebhookConfig(env),
    visitorKey: readVisitorKey(env),
    ...derived(cluster),
  };
}

/** Why a deployment on the default visitor key is told to set its own, at start. */
export const DEFAULT_VISITOR_KEY_WARNING =
  "LIVECOUNT_VISITOR_KEY is not set: the default key is public, so a script can pick viewer ids that inflate unique visitors; set one secret for every DC";

/** Why a node on the in-memory store says so at start: nothing it counts survives the process. */
export const MEMORY_STORE_WARNING =
  "neither LIVECOUNT_REDIS_URL nor LIVECOUNT_REDIS_CLUSTER is set: counters live in this process's memory and are lost when it exits; set LIVECOUNT_REDIS_URL to keep them";

/**
 * What a counter node's settings make it say at start (the counter node's process and `npm start`
 * alike): what it cannot keep, and what is not secret.
 */
export function startWarnings(config: CounterConfig): string[] {
  const warnings: string[] = [];
  if (config.redisUrl === undefined && config.redisCluster === undefined) warnings.push(MEMORY_STORE_WARNING);
  if (config.visitorKey === DEFAULT_VISITOR_KEY) warnings.push(DEFAULT_VISITOR_KEY_WARNING);
  if (config.natsUrl !== undefined && !outageNoticedInLease(config)) warnings.push(DC_HEARTBEAT_WARNING);
  return warnings;
}

export const DC_HEARTBEAT_WARNING =
  "LIVECOUNT_DC_HEARTBEAT_MS is too long for LIVECOUNT_GATEWAY_LEASE_MS: a NATS outage can drop gateways' viewers before it is noticed (keep three DC heartbeats and a sweep under two thirds of the lease)";

/**
 * Whether a NATS outage is noticed before a gateway's lease can lapse in it: the latest a silence
 * is noticed (a heartbeat, the silence threshold, a sweep) against two thirds of the lease, the
 * earliest a lease can lapse in it. The in-memory bus has no outage of its own.
 */
function outageNoticedInLease(c: CounterConfig): boolean {
  const noticedMs = c.dcHeartbeatMs + BUS_SILENCE_HEARTBEATS * c.dcHeartbeatMs + c.sweepMs;
  return HEARTBEATS_PER_LEASE * noticedMs < (HEARTBEATS_PER_LEASE - 1) * c.gatewayLeaseMs;
}

/** The development default: not a secret, so production sets its own. */
export const DEFAULT_VISITOR_KEY = "livecount-visitor-key-not-secret";
const MIN_VISITOR_KEY = 16;

function readVisitorKey(env: Env): string {
  const key = env.LIVECOUNT_VISITOR_KEY;
  if (key === undefined || key === "") return DEFAULT_VISITOR_KEY;
  if (key.length < MIN_VISITOR_KEY)
    throw new ConfigError(`LIVECOUNT_VISITOR_KEY must be at least ${MIN_VISITOR_KEY} characters`);
  return key;
}

/** Values computed from others, in one place. */
function derived(c: ClusterConfig): Pick<CounterConfig, "settleMs" | "sweepMs"> {
  return {
    // Gateways resync a partition as soon as they see its new owner; a third of a gateway lease
    // covers one missed heartbeat of the ring change.
    settleMs: Math.ceil(c.gatewayLeaseMs / 3),
    sweepMs: Math.max(50, Math.min(250, Math.floor(c.graceMs / 4) || 50)),
  };
}
