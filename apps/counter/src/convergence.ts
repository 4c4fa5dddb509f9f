import type { Bus } from "@livecount/bus";
import type { DcLiveness } from "@livecount/cluster";
import type { Clock, Logger } from "@livecount/runtime";
import type { Fence, Store } from "@livecount/store";
import type { ActorRegistry } from "./actor_registry.js";
import { AntiEntropy } from "./anti_entropy.js";
import { Bootstrap } from "./bootstrap.js";
import type { CounterMetrics } from "./counter_metrics.js";
import type { DurableWriter } from "./durable_writer.js";
import type { KeyReplication } from "./key_replication.js";
import { Replication } from "./replication.js";
import { TombAgreements } from "./tomb_agreements.js";

export interface ConvergenceOptions {
  readonly dc: string;
  readonly bus: Bus;
  readonly store: Store;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  readonly liveness: DcLiveness;
  readonly registry: ActorRegistry;
  readonly writer: DurableWriter;
  /** Other DCs' idempotency keys, in real time beside their entries (a queue group per DC). */
  readonly keys: KeyReplication;
  readonly fenceOf: (partition: number) => Fence | undefined;
  /** PartitionOwnership.leaseOf: what other DCs' entries are merged under. */
  readonly leaseOf: (partition: number) => Fence | undefined;
  /** Resolves with the fence once this node holds the partition's lease, or undefined after `timeoutMs`. */
  readonly whenHeld: (partition: number, timeoutMs: number) => Promise<Fence | undefined>;
  /** LIVECOUNT_ANTI_ENTROPY_MS. */
  readonly antiEntropyMs: number;
  /** LIVECOUNT_PEER_DCS. */
  readonly peerDcs: readonly string[];
  /** No other DC can exist (the embedded default's in-memory bus). */
  readonly alone: boolean;
  /** LIVECOUNT_DC_HEARTBEAT_MS: a live peer is heard within a few of these. */
  readonly dcHeartbeatMs: number;
  /** How long every other DC must have held a tombstone before it may be purged (TombAgreements). */
  readonly purgeGraceMs: number;
}

/** Heartbeats a new DC listens for before it decides it is the first of its deployment. */
const DISCOVERY_HEARTBEATS = 4;
/**
 * A bootstrap request is sent again after this long without any entries coming back: one sent as
 * the link came back may have gone out on a direction still down.
 */
const BOOTSTRAP_RETRY_MS = 1_000;

/**
 * How a partition this node holds converges with the other data centers: other DCs' changes in real
 * time (`Replication`), what the stream missed from durable state (`AntiEntropy`), and, for a store
 * that never had the partition's state, learning it from peers before serving (`Bootstrap`).
 */
export class Convergence {
  readonly #replication: Replication;
  readonly #antiEntropy: AntiEntropy;
  readonly #bootstrap: Bootstrap;
  readonly #o: ConvergenceOptions;
  #stopListening: (() => void) | undefined;
  readonly #tombs: TombAgreements;

  constructor(o: ConvergenceOptions) {
    this.#o = o;
    this.#tombs = new TombAgreements(o.purgeGraceMs);
    this.#replication = new Replication({
      dc: o.dc,
      bus: o.bus,
      logger: o.logger,
      registry: o.registry,
      metrics: o.metrics,
      writer: o.writer,
      leaseOf: o.leaseOf,
    });
    this.#antiEntropy = new AntiEntropy({
      dc: o.dc,
      bus: o.bus,
      store: o.store,
      clock: o.clock,
      logger: o.logger,
      metrics: o.metrics,
      liveness: o.liveness,
      registry: o.registry,
      writer: o.writer,
      fenceOf: o.fenceOf,
      leaseOf: o.leaseOf,
      periodMs: o.antiEntropyMs,
      received: (partition) => this.#bootstrap.received(partition),
      peerSynced: (partition, peer, peerLearning) =>
        this.#bootstrap.peerSynced(partition, peer, peerLearning),
      bootstrapped: (partition) => this.#bootstrap.isReady(partition),
      tombsAgreed: (partition, remote, at) => this.#tombs.agreed(partition, remote, at),
    });
    this.#bootstrap = new Bootstrap({
      dc: o.dc,
      store: o.store,
      clock: o.clock,
      logger: o.logger,
      fenceOf: o.fenceOf,
      leaseOf: o.leaseOf,
      liveRemotes: () => o.liveness.liveRemotes(),
      heardRemotes: () => o.liveness.remotes().map((r) => r.dc),
      expectedPeers: o.peerDcs,
      alone: o.alone,
      discoveryMs: DISCOVERY_HEARTBEATS * o.dcHeartbeatMs,
      retryMs: BOOTSTRAP_RETRY_MS,
      requestSync: (remote, partitions) => void this.#antiEntropy.compare(remote, partitions, partitions),
      serving: (partition) => {
        o.registry.partitionServing(partition);
        const fence = o.fenceOf(partition);
        if (fence !== undefined) o.writer.announceServing(partition, fence.epoch);
      },
    });
  }

  start(): void {
    this.#o.keys.start();
    this.#antiEntropy.start();
    this.#bootstrap.start();
    this.#stopListening = this.#o.liveness.onChange((remote, event) => {
      this.#o.keys.remoteChanged(remote, event.kind);
      if (event.kind === "down") this.#bootstrap.remoteDown(remote);
      else this.#bootstrap.remoteUp();
    });
  }

  stop(): void {
    this.#stopListening?.();
    this.#bootstrap.stop();
    this.#antiEntropy.stop();
    this.#replication.stop();
    this.#o.keys.stop();
  }

  partitionHeld(partition: number): void {
    this.#replication.partitionHeld(partition);
    this.#antiEntropy.partitionHeld(partition);
    void this.#bootstrap.partitionHeld(partition);
  }

  partitionDropped(partition: number): void {
    this.#replication.partitionDropped(partition);
    this.#antiEntropy.partitionDropped(partition);
    this.#bootstrap.partitionDropped(partition);
    this.#tombs.forget(partition);
  }

  /** The partition's fence, when this node holds it and it serves (bootstrapped). */
  servingFence(partition: number): Fence | undefined {
    return this.#bootstrap.isReady(partition) ? this.#o.fenceOf(partition) : undefined;
  }

  /** The partition's fence once it is held and serves, or undefined after `timeoutMs`. */
  whenServing(partition: number, timeoutMs: number): Promise<Fence | undefined> {
    const fence = this.servingFence(partition);
    return fence !== undefined ? Promise.resolve(fence) : this.#waitServing(partition, timeoutMs);
  }

  async #waitServing(partition: number, timeoutMs: number): Promise<Fence | undefined> {
    const deadline = this.#o.clock.monotonic() + timeoutMs;
    if ((await this.#o.whenHeld(partition, timeoutMs)) === undefined) return undefined;
    const left = Math.max(0, deadline - this.#o.clock.monotonic());
    if (!(await this.#bootstrap.whenReady(partition, left))) return undefined;
    return this.servingFence(partition);
  }

  /**
   * Tombstones of the partition that last changed here at or before this time are held by every
   * other DC (expected in LIVECOUNT_PEER_DCS or ever heard), and have been for the purge grace
   * (TombAgreements). Infinity when no other DC can exist, or none is listed and none was heard in
   * the discovery window since start (a deployment of several DCs lists them in LIVECOUNT_PEER_DCS);
   * 0 while some DC was not found to hold them long enough since this node holds the partition.
   */
  confirmedUntil(partition: number): number {
    const peers = new Set([...this.#o.peerDcs, ...this.#o.liveness.remotes().map((r) => r.dc)]);
    peers.delete(this.#o.dc);
    if (this.#o.alone) return Infinity;
    // No peer listed nor heard yet: alone once the discovery window has passed (as for bootstrap).
    if (peers.size === 0) return this.#bootstrap.discovering ? 0 : Infinity;
    const now = this.#o.clock.now();
    let until = Infinity;
    for (const dc of peers) until = Math.min(until, this.#tombs.heldUntil(partition, dc, now));
    return until;
  }

  /**
   * Within the discovery window since start (4 DC heartbeats): a DC not heard yet may still be heard.
   * Never when no other DC can exist (no NATS).
   */
  get discovering(): boolean {
    return !this.#o.alone && this.#bootstrap.discovering;
  }

  /** Per remote DC, partitions with a resync transfer under way (anti-entropy). */
  get resyncing(): Record<string, number> {
    return this.#antiEntropy.resyncing;
  }

  /** Partitions held that serve. */
  get bootstrapped(): number {
    return this.#bootstrap.progress.ready;
  }
}
