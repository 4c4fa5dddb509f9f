import { nodeSubject, type Bus, type Subscription } from "@livecount/bus";
import {
  BUS_SILENCE_HEARTBEATS,
  BusPulse,
  DcLiveness,
  IN_PROCESS_BUS,
  Membership,
  registerBusPulseMetrics,
  registerDcMetrics,
  type Successor,
} from "@livecount/cluster";
import { systemClock, type Clock, type Logger, type TimerHandle } from "@livecount/runtime";
import type { Fence, Store } from "@livecount/store";
import type { Registry } from "prom-client";
import type { ActorRegistry } from "./actor_registry.js";
import type { CounterConfig } from "./counter_config.js";
import { CounterMetrics } from "./counter_metrics.js";
import type { DurableWriter } from "./durable_writer.js";
import { BusIsolation } from "./bus_isolation.js";
import { createPageUnits } from "./page_units.js";
import { claimNodeId } from "./node_id_claim.js";
import { watchGateways } from "./gateway_watch.js";
import { PartitionOwnership, type LossReason } from "./partition_ownership.js";
import { CLUSTER_IMPORT_GATHER_MS, type KeyReplication } from "./key_replication.js";
import type { PresenceIntake } from "./presence_intake.js";
import { Convergence } from "./convergence.js";
import { EmptyPages } from "./empty_pages.js";
import { TombstonePurge } from "./tombstone_purge.js";
import { RequestRouter } from "./request_router.js";
import { Webhooks } from "./webhooks.js";

export interface CounterNodeOptions {
  readonly config: CounterConfig;
  readonly bus: Bus;
  readonly store: Store;
  readonly logger: Logger;
  readonly registry: Registry;
  readonly clock?: Clock;
  /**
   * No other data center can exist, so a new store needs no peers to bootstrap from. Default: when
   * no NATS is configured (the embedded default's in-memory bus reaches this process only).
   */
  readonly alone?: boolean;
  /** Called once the node stopped because a later process took its id (the process should exit). */
  readonly onSuperseded?: (by: Successor) => void;
}

/** How long a request waits for its partition, in partition leases (a takeover may wait out the old owner's). */
const OWNERSHIP_WAIT_FACTOR = 1.5;
/** Idle actors are looked for every this many sweeps. */
const PASSIVATION_SWEEPS = 20;

type Status = "new" | "running" | "stopping" | "stopped";

/**
 * A counter node: owns the partitions the ring gives it (each under a fenced lease), runs an actor
 * per page of those partitions, forwards what it does not own, persists this data center's entries
 * and publishes them only once durable. This class wires the units and runs their lifecycle:
 *
 * - `RequestRouter`: decodes requests; serves, forwards or refuses them;
 * - `PresenceIntake` (with `GatewayLeases`): presence from gateways, and whose is still alive;
 * - `ActorRegistry`: the page actors, their deadlines, and the one teardown;
 * - `DurableWriter`: flushes, group commits, and the one "persist, then publish" path;
 * - `Replication`: other DCs' entries in, this DC's changes out again when a DC may have missed them;
 * - `PartitionOwnership`, `Membership`, `DcLiveness`: leases, the ring, which DCs are live.
 */
export class CounterNode {
  readonly dc: string;
  readonly #config: CounterConfig;
  readonly #bus: Bus;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #membership: Membership;
  readonly #liveness: DcLiveness;
  /** Only with NATS: the in-memory bus is this process, silent only when the process is (a stall). */
  readonly #pulse: BusPulse | undefined;
  /** Only with NATS: hands the partitions over while this node alone is cut off the bus. */
  readonly #isolation: BusIsolation | undefined;
  readonly #ownership: PartitionOwnership;
  readonly #registry: ActorRegistry;
  readonly #writer: DurableWriter;
  readonly #intake: PresenceIntake;
  readonly #keys: KeyReplication;
  readonly #convergence: Convergence;
  readonly #emptyPages: EmptyPages;
  readonly #purge: TombstonePurge;
  readonly #router: RequestRouter;
  readonly #webhooks: Webhooks | undefined;
  readonly #subs: Subscription[] = [];
  #sweepTimer: TimerHandle | undefined;
  #sweeps = 0;
  /** A new incarnation is about to be announced (once for every partition lost in the same turn). */
  #renewingIncarnation = false;
  #status: Status = "new";
  readonly #onSuperseded: (by: Successor) => void;
  #supersededStop: Promise<void> | undefined;

  constructor(opts: CounterNodeOptions) {
    const config = (this.#config = opts.config);
    const { bus, store } = opts;
    this.dc = config.dc;
    this.#bus = bus;
    this.#onSuperseded = opts.onSuperseded ?? (() => {});
    const clock = (this.#clock = opts.clock ?? systemClock);
    const logger = (this.#log = opts.logger.child({
      component: "counter",
      node: config.nodeId,
      dc: config.dc,
    }));
    const busSilenceMs = BUS_SILENCE_HEARTBEATS * config.dcHeartbeatMs;
    const metrics = new CounterMetrics(opts.registry, {
      partitionsOwned: () => this.#ownership.heldCount,
      partitionsBootstrapped: () => this.#convergence.bootstrapped,
    });
    this.#membership = new Membership({
      bus,
      clock,
      logger,
      dc: config.dc,
      partitions: config.partitions,
      vnodes: config.vnodes,
      leaseMs: config.nodeLeaseMs,
      self: config.nodeId,
    });
    this.#ownership = new PartitionOwnership({
      store,
      clock,
      logger,
      // The lease holder is this process (its incarnation at start), not the node id: a restarted
      // process takes its predecessor's leases at once, with new epochs, never inherits theirs.
      node: `${config.nodeId}/${this.#membership.incarnation}`,
      reclaimFrom: `${config.nodeId}/`,
      leaseMs: config.partitionLeaseMs,
      retryMs: Math.max(100, Math.floor(config.partitionLeaseMs / 10)),
      mayAcquire: () =>
        this.#pulse === undefined || clock.monotonic() - this.#pulse.heardAt < 2 * busSilenceMs,
    });
    this.#ownership.onLoss((partition, reason) => this.#onPartitionLoss(partition, reason));
    this.#ownership.onAcquire((partition) => this.#onPartitionAcquired(partition));
    this.#pulse =
      config.natsUrl === undefined
        ? undefined
        : new BusPulse({ bus, clock, intervalMs: config.dcHeartbeatMs });
    if (this.#pulse !== undefined)
      registerBusPulseMetrics(opts.registry, "livecount_counter", this.#pulse, clock);
    this.#isolation =
      this.#pulse === undefined
        ? undefined
        : new BusIsolation({
            store,
            clock,
            logger,
            node: config.nodeId,
            health: this.#pulse,
            nodeLeaseMs: config.nodeLeaseMs,
            membership: this.#membership,
            registry: opts.registry,
            onChange: () => void this.#setWanted(this.#wanted()),
          });
    this.#liveness = new DcLiveness({
      bus,
      clock,
      logger,
      dc: config.dc,
      leaseMs: config.dcLeaseMs,
      heartbeatMs: config.dcHeartbeatMs,
      announceAs: config.nodeId,
      acksKeys: config.idempotencyAcrossDcs && config.idempotencyImportMaxKeys > 0,
      purgeBefore: () => this.#purge.before,
      ...(this.#pulse !== undefined ? { silence: { health: this.#pulse, silenceMs: busSilenceMs } } : {}),
    });
    registerDcMetrics(opts.registry, "livecount_counter", this.#liveness, () => clock.now(), config.peerDcs);
    const fenceOf = (partition: number): Fence | undefined => this.#ownership.fenceOf(partition);
    this.#webhooks =
      config.webhook === undefined
        ? undefined
        : new Webhooks({
            config: config.webhook,
            dc: config.dc,
            clock,
            logger,
            registry: opts.registry,
            liveness: this.#liveness,
          });
    ({
      registry: this.#registry,
      writer: this.#writer,
      intake: this.#intake,
      keys: this.#keys,
    } = createPageUnits({
      ...config,
      busHealth: this.#pulse ?? IN_PROCESS_BUS,
      busSilenceMs,
      clock,
      store,
      bus,
      logger,
      metrics,
      fenceOf,
      // Through the ownership: a write refused under an earlier tenure's fence loses nothing now.
      lost: (fence) => this.#ownership.refused(fence),
      liveness: this.#liveness,
      discovering: () => this.#convergence.discovering,
      importGatherMs: config.redisCluster !== undefined ? CLUSTER_IMPORT_GATHER_MS : 0,
      ...(this.#webhooks !== undefined ? { occupancy: this.#webhooks.occupancy } : {}),
    }));
    this.#convergence = new Convergence({
      dc: config.dc,
      bus,
      store,
      clock,
      logger,
      metrics,
      liveness: this.#liveness,
      registry: this.#registry,
      writer: this.#writer,
      keys: this.#keys,
      fenceOf,
      leaseOf: (partition) => this.#ownership.leaseOf(partition),
      whenHeld: (partition, timeoutMs) => this.#ownership.whenHeld(partition, timeoutMs),
      antiEntropyMs: config.antiEntropyMs,
      peerDcs: config.peerDcs,
      alone: opts.alone ?? config.natsUrl === undefined,
      dcHeartbeatMs: config.dcHeartbeatMs,
      // Two anti-entropy periods and a DC lease: longer than a transfer in flight takes to arrive.
      purgeGraceMs: 2 * config.antiEntropyMs + config.dcLeaseMs,
    });
    this.#emptyPages = new EmptyPages({
      store,
      clock,
      logger,
      metrics,
      ttlMs: config.emptyPageTtlMs,
      partitions: () => this.#membership.ring.partitionsOf(config.nodeId),
      servingFence: (partition) => this.#convergence.servingFence(partition),
      removed: (pages) => {
        for (const page of pages) this.#registry.find(page)?.series.forget();
      },
    });
    this.#purge = new TombstonePurge({
      nodeId: config.nodeId,
      store,
      clock,
      logger,
      metrics,
      partitions: () => this.#membership.ring.partitionsOf(config.nodeId),
      servingFence: (partition) => this.#convergence.servingFence(partition),
      onCommitChain: (step) => this.#writer.serialized(step),
      actorOf: (page) => this.#registry.find(page),
      actorsIn: (partition) => this.#registry.actorsIn(partition),
      floorRaised: (partition, floor) => this.#registry.purgeRaised(partition, floor),
      confirmedUntil: (partition) => this.#convergence.confirmedUntil(partition),
      recheckMs: config.antiEntropyMs,
    });
    this.#liveness.onPurgeAsked((before) => this.#purge.heard(before));
    // A DC going down or coming back moves the totals pages show: their peaks follow.
    this.#liveness.onChange((_dc, event) => {
      if (event.kind !== "gap") this.#registry.viewersChangedEverywhere();
    });

    // Answered (or refused as retryable) before a caller's own timeout runs out, never after: a
    // gateway waits the whole request timeout, a node forwarding for it half, the owner a quarter.
    const answerWithinMs = Math.floor(config.requestTimeoutMs / 2);
    this.#router = new RequestRouter({
      dc: config.dc,
      nodeId: config.nodeId,
      partitions: config.partitions,
      forwardTimeoutMs: answerWithinMs,
      ownershipWaitMs: Math.min(config.partitionLeaseMs * OWNERSHIP_WAIT_FACTOR, answerWithinMs / 2),
      bus,
      store,
      logger,
      metrics,
      ring: () => this.#membership.ring,
      fenceOf: (partition) => this.#convergence.servingFence(partition),
      whenHeld: (partition, timeoutMs) => this.#convergence.whenServing(partition, timeoutMs),
      servingFence: (partition) => this.#convergence.servingFence(partition),
      registry: this.#registry,
      intake: this.#intake,
      writer: this.#writer,
      isRunning: () => this.#status === "running",
      nodeInfo: () => ({
        type: "node_info",
        node: config.nodeId,
        incarnation: this.#membership.incarnation,
        ready: this.ready,
        partitions: this.#ownership.held(),
        actors: this.#registry.size,
        dirty: this.#writer.dirtyCount,
        flushLagMs: this.#writer.flushLagMs,
        bootstrapped: this.#convergence.bootstrapped,
        resyncing: this.#convergence.resyncing,
        ts: clock.now(),
      }),
      purge: (olderThanMs) => this.#purge.request(olderThanMs),
    });
  }

  get nodeId(): string {
    return this.#config.nodeId;
  }

  /** Ready once every partition the ring gives it is held and serves (bootstrapped): it can answer for them. */
  get ready(): boolean {
    if (this.#status !== "running") return false;
    const wanted = this.#membership.ring.partitionsOf(this.#config.nodeId);
    return wanted.every((p) => this.#convergence.servingFence(p) !== undefined);
  }

  async start(): Promise<void> {
    if (this.#status !== "new") throw new Error("counter node already started");
    const { dc, nodeId } = this.#config;
    await claimNodeId(this.#bus, this.#clock, this.#log, this.#config);
    this.#status = "running";
    this.#subs.push(
      this.#bus.serve(nodeSubject(dc, nodeId), (data) => this.#router.serve(data)),
      watchGateways({
        bus: this.#bus,
        dc,
        logger: this.#log,
        intake: this.#intake,
        membership: this.#membership,
        gatewayLeaseMs: this.#config.gatewayLeaseMs,
        isRunning: () => this.#status === "running",
      }),
      // What it published just before its connection dropped may be lost (a server that stopped
      // answering, left by BusPulse; a slow consumer cut off): its heartbeat says so, and gateways re-snapshot.
      { unsubscribe: this.#bus.on("reconnected", () => this.#membership.reconnected()) },
    );
    this.#convergence.start();
    this.#emptyPages.start();
    this.#liveness.start();
    this.#pulse?.start();
    this.#membership.onChange(() => void this.#setWanted(this.#wanted()));
    this.#membership.onSuperseded((by) => this.#superseded(by));
    this.#membership.start();
    this.#ownership.start();
    this.#isolation?.start();
    await this.#setWanted(this.#wanted());
    if (this.#status !== "running") return; // superseded meanwhile
    this.#scheduleSweep();
    this.#log.info({ partitions: this.#ownership.heldCount }, "counter node started");
  }

  /** Hands partitions over: leaves the ring, flushes every page, releases every lease. */
  async stop(): Promise<void> {
    if (this.#status !== "running") return this.#supersededStop;
    this.#status = "stopping";
    this.#membership.leave();
    this.#keys.leave();
    await this.#writer.drain();
    await this.#ownership.close();
    await this.#keys.drained();
    await this.#shutDown(this.#config.settleMs);
    this.#log.info("counter node stopped");
  }

  /** A later process took this node's id: stops at once, handing nothing over (SupersededListener). */
  #superseded(by: Successor): void {
    if (this.#status !== "running") return;
    this.#status = "stopping";
    this.#log.error({ successor: by }, "a later process took this node id; stopping without handing over");
    this.#ownership.abandon();
    this.#supersededStop = this.#shutDown(0)
      .catch((err: unknown) => this.#log.error({ err }, "stopping failed"))
      .finally(() => this.#onSuperseded(by));
  }

  async #shutDown(webhookWaitMs: number): Promise<void> {
    this.#membership.stop();
    this.#liveness.stop();
    this.#pulse?.stop();
    this.#isolation?.stop();
    this.#convergence.stop();
    this.#emptyPages.stop();
    this.#purge.stop();
    for (const sub of this.#subs) sub.unsubscribe();
    this.#writer.close();
    this.#registry.close();
    // Successors hold a partition's deliveries for the settle window: what this node still has
    // queued goes out before theirs, if the receiver takes it within that.
    await this.#webhooks?.close(webhookWaitMs);
    if (this.#sweepTimer !== undefined) this.#clock.clearTimeout(this.#sweepTimer);
    this.#status = "stopped";
  }

  // --- ownership ---------------------------------------------------------------------------------

  /** The partitions the ring gives this node; none while it is cut off the bus alone (BusIsolation). */
  #wanted(): number[] {
    return this.#isolation?.isolated === true ? [] : this.#membership.ring.partitionsOf(this.#config.nodeId);
  }

  async #setWanted(partitions: number[]): Promise<void> {
    try {
      await this.#ownership.setWanted(partitions);
    } catch (err) {
      this.#log.error({ err }, "ownership change failed; retrying on the next lease cycle");
    }
  }

  /** Serves once held and bootstrapped; the registry is told when it serves (Convergence). */
  #onPartitionAcquired(partition: number): void {
    this.#convergence.partitionHeld(partition);
  }

  /** Drops a partition's actors: after flushing them when handing over, at once when lost. */
  async #onPartitionLoss(partition: number, reason: LossReason): Promise<void> {
    if (reason === "released") await this.#writer.drain();
    this.#registry.dropPartition(partition, reason === "released" ? "partition_released" : "partition_lost");
    this.#convergence.partitionDropped(partition);
    this.#log.info({ partition, reason }, "partition dropped");
    // The partition's presence went with its actors, and its next owner may be this node again
    // with no ring change (the lease ran out while Redis was unreachable, or during a stall): only
    // a new incarnation makes the gateways resync what they hold here.
    if (reason === "lost" && this.#status === "running") this.#renewIncarnation();
  }

  #renewIncarnation(): void {
    if (this.#renewingIncarnation) return;
    this.#renewingIncarnation = true;
    this.#clock.defer(() => {
      this.#renewingIncarnation = false;
      if (this.#status !== "running") return;
      this.#membership.renewIncarnation();
      this.#log.warn({ incarnation: this.#membership.incarnation }, "presence state lost; new incarnation");
    });
  }

  // --- time --------------------------------------------------------------------------------------

  #scheduleSweep(): void {
    this.#sweepTimer = this.#clock.setTimeout(() => {
      try {
        this.#sweep();
      } catch (err) {
        this.#log.error({ err }, "sweep failed");
      }
      if (this.#status === "running") this.#scheduleSweep();
    }, this.#config.sweepMs);
  }

  #sweep(): void {
    const monotonic = this.#clock.monotonic();
    this.#registry.tick(monotonic);
    this.#intake.sweep(monotonic);
    if (++this.#sweeps % PASSIVATION_SWEEPS === 0) this.#registry.passivateIdle(this.#clock.now());
  }
}
