import {
  BusSilence,
  GatewayLeases,
  HEARTBEATS_PER_LEASE,
  type BusHealth,
  type GatewayLease,
  type GatewayPresence,
} from "@livecount/cluster";
import {
  transitionsOf,
  type GatewayHeartbeat,
  type NodeReply,
  type PageTransitions,
  type PresenceBatch,
  type PresenceOp,
  type PresencePages,
  type PresenceSync,
  type PresenceSyncPart,
} from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import type { Logger } from "@livecount/runtime";
import type { ActorRegistry } from "./actor_registry.js";
import type { CounterMetrics } from "./counter_metrics.js";
import { errorReply } from "./replies.js";
import type { PageActor } from "./page_actor.js";
import type { Hold } from "./page_presence.js";
import { SyncParts } from "./sync_parts.js";

const ACK: NodeReply = { type: "ack" };
/**
 * The answer to presence of an incarnation let go here that may still run: retryable, so a live
 * gateway sends it again (a sync again) once a probe took it back; a late message's sender is gone.
 */
const RELEASED: NodeReply = errorReply("unavailable", "this gateway incarnation was released here");

export interface PresenceIntakeOptions {
  readonly registry: ActorRegistry;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  readonly partitions: number;
  /** A gateway's lease until its first heartbeat says otherwise. */
  readonly gatewayLeaseMs: number;
  /** How often the node calls `sweep`: a sweep much later than that means this process did not run. */
  readonly sweepMs: number;
  /** The broker's answers to this node (BusPulse): whether the bus carries anything here. */
  readonly bus: BusHealth;
  /** A round trip unanswered for longer than this is a silence of the bus, not of the gateways: their leases wait. */
  readonly busSilenceMs: number;
  /**
   * Asks whether gateway incarnation `gateway` still runs, waiting at most `timeoutMs`
   * (`probeGateway` on the node's bus).
   */
  readonly probe: (
    gateway: string,
    timeoutMs: number,
  ) => Promise<{ readonly presence: GatewayPresence; readonly reconnects: number }>;
  /**
   * The process's monotonic clock, as `bus` times are: gateway leases and releases are durations
   * here, and a wall clock stepping back must not keep a killed gateway's viewers counting.
   */
  readonly now: () => number;
}

/**
 * Presence as gateways send it to a page's owner: batches of transitions and whole-partition syncs,
 * applied to page actors, and the gateway leases that say whose contributions are still alive.
 */
export class PresenceIntake {
  readonly #o: PresenceIntakeOptions;
  readonly #leases: GatewayLeases;
  /** Resyncs sent in parts, gathered until their last (sync_parts.ts). */
  readonly #parts: SyncParts;
  /** When the last sweep ran. */
  #lastSweepAt = 0;
  /** Silences of the bus: no lease lapses during one. */
  readonly #busSilence: BusSilence;
  /** When the last stall of this process ended: a silence of the bus is not counted from before it. */
  #stallEndedAt = -Infinity;

  constructor(options: PresenceIntakeOptions) {
    this.#o = options;
    this.#leases = new GatewayLeases(options.gatewayLeaseMs);
    this.#parts = new SyncParts(options.now);
    this.#busSilence = new BusSilence(options.bus, options.busSilenceMs);
  }

  /**
   * A batch of one gateway's transitions on pages of one partition, in order, as gateways of earlier
   * releases send it (`presence`): grouped by page, it is applied as `presence_pages` is.
   */
  batch(batch: PresenceBatch): Promise<NodeReply> {
    const byPage = new Map<string, PresenceOp[]>();
    for (const op of batch.ops) {
      const ops = byPage.get(op.page);
      if (ops === undefined) byPage.set(op.page, [op]);
      else ops.push(op);
    }
    const pages = [...byPage].map(([page, ops]): PageTransitions => [page, transitionsOf(ops)]);
    const { gateway, partition, reconnects } = batch;
    return this.pages({ type: "presence_pages", gateway, partition, pages, reconnects });
  }

  /** A batch of one gateway's transitions on pages of one partition, grouped by page, in order per page. */
  async pages(batch: PresencePages): Promise<NodeReply> {
    const refusal = this.#accept(batch.gateway, batch.reconnects);
    if (refusal !== undefined) return refusal;
    // Checked once per page, not per transition: hashing every viewer's page would cost more than
    // the transition. Nothing is applied from a batch with a page of another partition.
    for (const [page] of batch.pages)
      if (partitionOf(page, this.#o.partitions) !== batch.partition) return wrongPartition(page, batch);
    const loading: Array<Promise<void>> = [];
    let count = 0;
    const unvisited =
      batch.unvisited === undefined
        ? undefined
        : new Map(batch.unvisited.map(([page, viewers]) => [page, new Set(viewers)]));
    for (const entry of batch.pages) {
      count += entry[1].length / 2;
      const pending = this.#apply(batch, entry, unvisited?.get(entry[0]));
      if (pending !== undefined) loading.push(pending);
    }
    if (loading.length > 0) await Promise.all(loading);
    this.#o.metrics.presenceOps.inc(count);
    return ACK;
  }

  /** One page's transitions, now when its actor is active (its mailbox is empty), else once it is. */
  #apply(
    batch: PresencePages,
    [page, transitions]: PageTransitions,
    unvisited?: ReadonlySet<string>,
  ): Promise<void> | undefined {
    // Recorded now, not when the transitions run: a sync that arrives while the page still loads
    // must see the page among the gateway's and queue its replacement behind them.
    this.#leases.holds(batch.gateway, page);
    const apply = (actor: PageActor): void => {
      // The gateway went down or lapsed while the page loaded: what it sent is history now.
      if (!this.#leases.knows(batch.gateway)) return;
      this.#leases.holds(batch.gateway, page);
      actor.presenceTransitions(batch.gateway, transitions, unvisited);
    };
    const actor = this.#o.registry.find(page);
    if (actor?.status !== "active") return this.#o.registry.run(page, batch.partition, apply);
    apply(actor);
    return undefined;
  }

  /**
   * One part of a resync too large for one message: gathered, and applied as the one sync the parts
   * make once the last has come (sync_parts.ts). A part that does not follow the one before is
   * refused: the gateway resyncs from the first.
   */
  async syncPart(part: PresenceSyncPart): Promise<NodeReply> {
    const refusal = this.#accept(part.gateway, part.reconnects);
    if (refusal !== undefined) return refusal;
    for (const page of Object.keys(part.pages))
      if (partitionOf(page, this.#o.partitions) !== part.partition) return wrongPartition(page, part);
    const whole = this.#parts.add(part);
    if (whole === "missing")
      return errorReply("unavailable", `part ${part.part} of a resync came without the parts before it`);
    return whole === undefined ? ACK : this.sync(whole);
  }

  /** Resyncs in parts being gathered (diagnostics and tests). */
  get resyncsInParts(): number {
    return this.#parts.size;
  }

  /** A gateway's whole contribution to one partition, replacing what it held there. */
  async sync(sync: PresenceSync): Promise<NodeReply> {
    const refusal = this.#accept(sync.gateway, sync.reconnects);
    if (refusal !== undefined) return refusal;
    // A resync in parts begun before this one will not be finished.
    this.#parts.forget(sync.gateway, sync.partition);
    const pages = new Set(Object.keys(sync.pages));
    for (const page of pages) {
      if (partitionOf(page, this.#o.partitions) !== sync.partition) return wrongPartition(page, sync);
    }
    // Pages the gateway held here before but no longer lists: it holds nobody there now.
    for (const page of this.#leases.pagesOf(sync.gateway)) {
      if (!pages.has(page) && partitionOf(page, this.#o.partitions) === sync.partition) pages.add(page);
    }
    // As for batches: recorded when queued, so a later sync queues behind this one's work.
    for (const page of pages) if (heldIn(sync, page).size > 0) this.#leases.holds(sync.gateway, page);
    await Promise.all(
      [...pages].map((page) =>
        this.#o.registry.run(page, sync.partition, (actor) => {
          if (!this.#leases.knows(sync.gateway)) return;
          const held = heldIn(sync, page);
          if (held.size > 0) this.#leases.holds(sync.gateway, page);
          const unvisited =
            sync.unvisited !== undefined && Object.hasOwn(sync.unvisited, page)
              ? new Set(sync.unvisited[page])
              : undefined;
          actor.replaceGateway(sync.gateway, held, unvisited);
        }),
      ),
    );
    return ACK;
  }

  /**
   * A gateway heartbeat: alive, or going down (its sockets closed; viewers linger for the grace
   * window). A restarted gateway (same node, later start) ends its previous incarnation the same
   * way once that one has missed a heartbeat (here or at a later sweep): that process is dead, and
   * the viewers it held linger while they reconnect, so the count neither dips nor keeps the dead
   * sockets until the old lease lapses. True when the gateway was not known here: it has just
   * started (or this node has). A heartbeat of an incarnation let go here is not heard (a NATS
   * server passed it on late, or it still runs: `#released`).
   */
  heartbeat(beat: GatewayHeartbeat): boolean {
    this.#o.bus.delivered();
    const now = this.#o.now();
    const known = this.#leases.knows(beat.gateway);
    if (beat.state === "down") {
      const lease = this.#leases.drop(beat.gateway, now, true);
      if (lease !== undefined) this.#release(lease);
      return false;
    }
    const origin =
      beat.node !== undefined && beat.startedAt !== undefined
        ? { node: beat.node, startedAt: beat.startedAt }
        : undefined;
    if (!this.#leases.touch(beat.gateway, now, beat.leaseMs, origin)) {
      this.#released(beat.gateway, now);
      return false;
    }
    if (this.#leases.hasLaterIncarnation(beat.gateway))
      this.#o.logger.warn(
        { gateway: beat.gateway, node: beat.node },
        "two live gateways share a node id; LIVECOUNT_NODE_ID must be unique per gateway process",
      );
    this.#supersede(now);
    return !known;
  }

  /**
   * A message of `gateway`, which was let go here, came at `now`. Sent before the release and passed
   * on late by a NATS server, it must not count; but the gateway may still run (let go while it
   * stalled, or probed while its bus blipped), and only it can say so: it is asked, at most once a
   * heartbeat interval, and taken back when it answers. Until then everything it sends is refused,
   * presence with a retryable error: once taken back, its resync (after its stall, or its bus
   * reconnect) comes again and counts.
   */
  #released(gateway: string, now: number): void {
    if (!this.#leases.shouldProbe(gateway, now)) return;
    const timeoutMs = this.#o.gatewayLeaseMs / HEARTBEATS_PER_LEASE;
    void this.#o.probe(gateway, timeoutMs).then(({ presence, reconnects }) => {
      if (presence !== "alive" || this.#leases.released(gateway) === undefined) return;
      this.#leases.readmit(gateway, this.#o.now(), reconnects);
      this.#o.logger.info({ gateway }, "a gateway released here still runs; hearing it again");
    });
  }

  /** Earlier incarnations of restarted gateways that missed a heartbeat: their viewers linger. */
  #supersede(now: number): void {
    for (const lease of this.#leases.supersede(now)) this.#restarted(lease);
  }

  /**
   * The other incarnations of `gateway`'s node known here: what a restart replaced, for the node to
   * ask whether they still run. All of them, not only those that report an earlier start: a
   * restart's clock may have stepped back. One that answers is left to the heartbeats.
   */
  predecessors(gateway: string): string[] {
    return this.#leases.siblingIncarnations(gateway);
  }

  /**
   * Nothing answers for `gateway` any more (a probe found no responder): its process is gone. It is
   * released as a superseded incarnation is, at once rather than after a missed heartbeat: its
   * viewers linger for the grace window while they reconnect, its sockets stop counting.
   */
  gone(gateway: string): void {
    const lease = this.#leases.drop(gateway, this.#o.now(), false);
    if (lease !== undefined) this.#restarted(lease);
  }

  #restarted(lease: GatewayLease): void {
    this.#o.metrics.gatewayRestarts.inc();
    this.#o.logger.info({ gateway: lease.gateway }, "gateway restarted; releasing its viewers");
    this.#release(lease);
  }

  /** Everything `lease`'s gateway held here lingers for the grace window (its sockets are gone). */
  #release({ gateway, pages }: GatewayLease): void {
    this.#parts.forget(gateway);
    for (const page of pages) {
      this.#o.registry.find(page)?.run((failure) => {
        if (failure === undefined) this.#o.registry.find(page)?.replaceGateway(gateway, new Map());
      });
    }
  }

  /**
   * Drops, without grace, everything held by gateways whose lease lapsed by `now` (kill -9). Neither
   * kind of silence below is the gateways', and a drop on it would show every page they hold with
   * no viewers until they resync; neither counts against a lease:
   * - time this process did not run (paused, starved, a long GC) since the last sweep: their
   *   heartbeats wait in the socket, read right after this sweep;
   * - time the bus brought this node nothing, not even the broker's answers (NATS down or frozen):
   *   no lease lapses meanwhile, and once the broker answers again each lease gets back the part of
   *   the silence after its gateway was last heard.
   */
  sweep(now: number): void {
    const stalled = this.#lastSweepAt > 0 && now - this.#lastSweepAt > 2 * this.#o.sweepMs;
    if (stalled) {
      // Inside a silence of the bus, the silence covers the stall once it ends.
      if (!this.#busSilence.silent) this.#leases.compensateSilence(this.#lastSweepAt + this.#o.sweepMs, now);
      this.#stallEndedAt = now;
    }
    this.#lastSweepAt = now;
    // After a stall the broker's answers are read after this sweep: the bus is judged at the next.
    if (!stalled) this.#judgeBus(now);
    if (this.#busSilence.silent) return;
    this.#supersede(now);
    this.#expire(now);
  }

  /** Starts a silence of the bus once a round trip went unanswered for too long, and ends it once one is answered. */
  #judgeBus(now: number): void {
    // A silence is not counted from before a stall already compensated.
    const bus = this.#busSilence.judge(now, this.#stallEndedAt);
    if (bus.state === "silent" && bus.began)
      this.#o.logger.warn({ silentMs: now - bus.from }, "nothing comes on the bus; gateway leases wait");
    if (bus.state !== "ended") return;
    this.#leases.compensateSilence(bus.from, bus.to);
    this.#o.logger.info(
      { silentMs: bus.to - bus.from },
      "the bus carries again; its silence does not count against gateway leases",
    );
  }

  #expire(now: number): void {
    for (const { gateway, pages } of this.#leases.expire(now)) {
      this.#o.metrics.gatewayExpiries.inc();
      this.#o.logger.warn({ gateway, pages: pages.size }, "gateway lease lapsed; dropping its viewers");
      for (const page of pages) {
        const actor = this.#o.registry.find(page);
        if (actor?.status === "active") actor.dropGateway(gateway);
      }
    }
  }

  /** The page left memory. */
  forgetPage(page: string): void {
    this.#leases.forgetPage(page);
  }

  /** Whether any gateway lease still lists the page (tests: teardown leaves nothing behind). */
  remembers(page: string): boolean {
    return this.#leases.anyHolds(page);
  }

  /**
   * A presence request proves the gateway alive (its lease length comes with its heartbeats):
   * undefined, apply it. Unless it came over a connection the gateway has replaced since
   * (GatewayLeases.acceptPresence), or from an incarnation that said it went down: acknowledged, as
   * nobody waits for the answer, and dropped. Or from an incarnation let go here otherwise: refused
   * until it proves it runs (`#released`).
   */
  #accept(gateway: string, reconnects = 0): NodeReply | undefined {
    this.#o.bus.delivered();
    const now = this.#o.now();
    const verdict = this.#leases.acceptPresence(gateway, now, reconnects);
    if (verdict === "accepted") return undefined;
    this.#o.metrics.stalePresence.inc();
    if (verdict !== "unproven") return ACK;
    this.#released(gateway, now);
    return RELEASED;
  }
}

function wrongPartition(page: string, request: PresencePages | PresenceSync | PresenceSyncPart): NodeReply {
  return errorReply("bad_frame", `page ${JSON.stringify(page)} is not in partition ${request.partition}`);
}

/** What a sync says its gateway holds on `page`, by viewer (PresenceSync: defaults one socket, active). */
function heldIn(sync: PresenceSync, page: string): Map<string, Hold> {
  const viewers = Object.hasOwn(sync.pages, page) ? sync.pages[page]! : [];
  const sockets =
    sync.sockets !== undefined && Object.hasOwn(sync.sockets, page) ? sync.sockets[page] : undefined;
  const passive = new Set(
    sync.passive !== undefined && Object.hasOwn(sync.passive, page) ? sync.passive[page] : [],
  );
  return new Map(
    viewers.map((viewer, i) => [viewer, { sockets: sockets?.[i] ?? 1, active: !passive.has(viewer) }]),
  );
}
