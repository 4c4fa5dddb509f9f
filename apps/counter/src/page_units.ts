import { pageSubject, type Bus } from "@livecount/bus";
import { probeReleasedGateway, type BusHealth, type DcLiveness } from "@livecount/cluster";
import type { Clock, Logger } from "@livecount/runtime";
import type { Fence, Store } from "@livecount/store";
import { ActorRegistry } from "./actor_registry.js";
import type { CounterMetrics } from "./counter_metrics.js";
import type { OccupancyWatch } from "./occupancy.js";
import { DurableWriter } from "./durable_writer.js";
import { PresenceIntake } from "./presence_intake.js";
import { KeyReplication } from "./key_replication.js";
import { RecentKeys } from "./recent_keys.js";

/**
 * Heartbeats beyond the longest DC lease that sent keys are held for a DC that does not acknowledge
 * them (HeldKeys.keepMs): a DC is found down at the first lease check after its lease lapses.
 */
const HELD_HEARTBEATS = 4;
/**
 * DC heartbeats a keys message waits for its acknowledgements before it goes again (2 s by default,
 * twice as long each try): the link's round trip, a receiving node's import queue (up to a second or
 * two when it is full) and a heartbeat's slack, with room.
 */
const ACK_WAIT_HEARTBEATS = 8;

export interface PageUnitsOptions {
  readonly dc: string;
  readonly partitions: number;
  readonly graceMs: number;
  readonly settleMs: number;
  readonly passivateMs: number;
  readonly maxActors: number;
  readonly coalesceMs: number;
  readonly flushMaxWrites: number;
  readonly mergesInFlight: number;
  readonly idempotencyTtlMs: number;
  /** RecentKeysOptions.memoryMs and maxKeys. */
  readonly idempotencyMemoryMs: number;
  readonly idempotencyMemoryKeys: number;
  /** LIVECOUNT_IDEMPOTENCY_ACROSS_DCS and _IMPORT_MAX_KEYS (KeyReplication). */
  readonly idempotencyAcrossDcs: boolean;
  readonly idempotencyImportMaxKeys: number;
  /**
   * LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS, and the DC lease and heartbeat: how long keys wait for
   * acknowledgements, and are held for DCs that do not acknowledge (HeldKeys).
   */
  readonly idempotencyResendMaxKeys: number;
  readonly dcLeaseMs: number;
  readonly dcHeartbeatMs: number;
  /**
   * Whether the node is within its discovery window (Convergence.discovering: a restarted node serves
   * before it hears the other DCs); default never.
   */
  readonly discovering?: () => boolean;
  /** KeyReplicationOptions.gather's time (on Redis Cluster); default none. */
  readonly importGatherMs?: number;
  readonly maxCountersPerPage: number;
  readonly gatewayLeaseMs: number;
  readonly sweepMs: number;
  /** PresenceIntakeOptions.bus (a BusPulse) and busSilenceMs. */
  readonly busHealth: BusHealth;
  readonly busSilenceMs: number;
  readonly clock: Clock;
  readonly store: Store;
  readonly bus: Bus;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  /** The fence of a partition this node holds, or undefined. */
  readonly fenceOf: (partition: number) => Fence | undefined;
  /** The store found the partition's fence stale. */
  readonly lost: (fence: Fence) => void;
  /** Occupancy webhooks, when configured. */
  readonly occupancy?: OccupancyWatch;
  /**
   * Which data centers' viewers count now (what peaks record), the longest DC lease heard, and what
   * each DC does with keys (HeldKeys).
   */
  readonly liveness?: Pick<DcLiveness, "isLive" | "longestLeaseMs" | "keysTaken" | "hasRemotes">;
  /** LIVECOUNT_NODE_ID: where other DCs acknowledge this node's keys. */
  readonly nodeId: string;
  /** LIVECOUNT_PEER_DCS: DCs sent keys are held for from the start. */
  readonly peerDcs: readonly string[];
  /** LIVECOUNT_VISITOR_KEY. */
  readonly visitorKey?: string;
}

/** The units that keep per-page state on a counter node, and how they depend on each other. */
export interface PageUnits {
  readonly registry: ActorRegistry;
  readonly writer: DurableWriter;
  readonly intake: PresenceIntake;
  readonly keys: KeyReplication;
}

/**
 * Wires the actor registry, the durable writer and the presence intake: actors ask the writer to
 * flush them, and the registry's one teardown makes the writer and the gateway leases forget the
 * page. The node and the units' tests both build them here, so the tests run the real wiring.
 */
export function createPageUnits(o: PageUnitsOptions): PageUnits {
  const { clock, store, bus, logger, metrics } = o;
  const registry: ActorRegistry = new ActorRegistry({
    dc: o.dc,
    graceMs: o.graceMs,
    settleMs: o.settleMs,
    passivateMs: o.passivateMs,
    maxActors: o.maxActors,
    clock,
    store,
    logger,
    metrics,
    markDirty: (actor, rewrite) => writer.markDirty(actor, undefined, rewrite),
    forget: (actor) => {
      writer.forget(actor);
      intake.forgetPage(actor.page);
      o.occupancy?.forget(actor);
    },
    ...(o.occupancy !== undefined ? { occupancy: o.occupancy } : {}),
    ...(o.liveness !== undefined ? { isLive: (dc: string) => o.liveness!.isLive(dc) } : {}),
    ...(o.visitorKey !== undefined ? { visitorKey: o.visitorKey } : {}),
  });
  const discovering = o.discovering ?? (() => false);
  const keys = new KeyReplication({
    dc: o.dc,
    node: o.nodeId,
    bus,
    store,
    logger,
    metrics,
    partitions: o.partitions,
    keyTtlMs: o.idempotencyTtlMs,
    enabled: o.idempotencyAcrossDcs,
    maxQueued: o.idempotencyImportMaxKeys,
    held: {
      clock,
      peers: o.peerDcs,
      keysTaken: (dc) => o.liveness?.keysTaken(dc) ?? "unknown",
      discovering,
      ackWaitMs: ACK_WAIT_HEARTBEATS * o.dcHeartbeatMs,
      // For DCs that do not acknowledge: a DC cut off is found down within its lease (as it announces
      // it) and a sweep; a shorter cut shows as a gap in its heartbeats at the first one after.
      keepMs: () => (o.liveness?.longestLeaseMs() ?? o.dcLeaseMs) + HELD_HEARTBEATS * o.dcHeartbeatMs,
      ttlMs: o.idempotencyTtlMs,
      maxKeys: o.idempotencyResendMaxKeys,
    },
    resendCoalesceMs: o.dcHeartbeatMs,
    // Another DC may hear: one was heard (live or cut off now), is expected, or may be there still
    // unheard (the discovery window).
    mayBeHeard: () => (o.liveness?.hasRemotes ?? false) || o.peerDcs.length > 0 || discovering(),
    ...(o.importGatherMs !== undefined && o.importGatherMs > 0
      ? { gather: { ms: o.importGatherMs, clock } }
      : {}),
  });
  const recentKeys = new RecentKeys({
    clock,
    logger,
    store,
    fenceOf: o.fenceOf,
    keyTtlMs: o.idempotencyTtlMs,
    // Never past the keys' TTL: a retry after it is a new change, in memory as in the store.
    memoryMs: Math.min(o.idempotencyMemoryMs, o.idempotencyTtlMs),
    maxKeys: o.idempotencyMemoryKeys,
    across: keys,
  });
  store.onReconnect?.(() => {
    void recentKeys.restoreAll();
    registry.rewriteOwn();
  });
  const writer = new DurableWriter({
    dc: o.dc,
    store,
    bus,
    clock,
    logger,
    metrics,
    coalesceMs: o.coalesceMs,
    flushMaxWrites: o.flushMaxWrites,
    mergesInFlight: o.mergesInFlight,
    idempotencyTtlMs: o.idempotencyTtlMs,
    maxCountersPerPage: o.maxCountersPerPage,
    fenceOf: o.fenceOf,
    lost: o.lost,
    subjectOf: (page, partition) => registry.find(page)?.subject ?? pageSubject(page, partition),
    recentKeys,
  });
  const intake = new PresenceIntake({
    registry,
    logger,
    metrics,
    partitions: o.partitions,
    gatewayLeaseMs: o.gatewayLeaseMs,
    sweepMs: o.sweepMs,
    bus: o.busHealth,
    busSilenceMs: o.busSilenceMs,
    probe: (gateway, timeoutMs) => probeReleasedGateway(bus, o.dc, gateway, timeoutMs),
    now: () => clock.monotonic(),
  });
  return { registry, writer, intake, keys };
}
