import { randomUUID } from "node:crypto";
import { nodesSubject, type Bus, type Subscription } from "@livecount/bus";
import { decodeMessage, encodeMessage, type NodeHeartbeat } from "@livecount/protocol";
import { HashRing } from "@livecount/ring";
import { LOG_REPEAT_MS, LogThrottle, type Clock, type Logger, type TimerHandle } from "@livecount/runtime";
import { HEARTBEATS_PER_LEASE } from "./cluster_config.js";
import { isLaterTwin } from "./twins.js";

export interface MembershipOptions {
  readonly bus: Bus;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly dc: string;
  readonly partitions: number;
  readonly vnodes: number;
  /** How long a silent node stays on the ring. */
  readonly leaseMs: number;
  /** This process's node id when it is a counter node (it announces itself); absent for gateways. */
  readonly self?: string;
}

/**
 * Called when the ring changes or a node restarted (same id, new incarnation). Partitions owned by a
 * restarted node lost their presence state as surely as partitions that moved.
 */
export type RingListener = (ring: HashRing, previous: HashRing, restarted: ReadonlySet<string>) => void;

/**
 * Called with a node whose bus connection came back (NodeHeartbeat.reconnects grew), or that is heard
 * again, same incarnation, after it was forgotten for its silence: what it published meanwhile may
 * have been lost either way.
 */
export type ReconnectListener = (node: string) => void;

/** Another live process that announces this node's id, started later: the one that replaced this one. */
export interface Successor {
  readonly incarnation: string;
  readonly startedAt: number;
}

/**
 * Called once, when a live process announcing this node's id with a later start is heard: this
 * process was replaced while it was frozen or cut off (its supervisor thought it dead and started
 * another), and must stop at once, handing nothing over (`leave` would take its successor off the ring).
 */
export type SupersededListener = (by: Successor) => void;

const NONE: ReadonlySet<string> = new Set();
/** Forgotten nodes whose incarnations are kept (Membership.#forgotten): far more than a DC runs. */
const MAX_FORGOTTEN = 1024;
/**
 * This process's own incarnations it still knows as its own: a heartbeat of one it renewed since
 * may still be on its way back (the in-memory bus echoes; NATS, with noEcho, does not).
 */
const OWN_INCARNATIONS = 1024;

/**
 * The live counter nodes of a data center and the ring they form. Every process builds the same
 * ring from the same heartbeats, so every gateway routes a page to the same owner (sticky).
 */
export class Membership {
  readonly #opts: MembershipOptions;
  /** When each node was last heard, on the monotonic clock: a wall clock stepping back keeps no dead node. */
  readonly #lastSeen = new Map<string, number>();
  readonly #incarnations = new Map<string, string>();
  /** The highest `reconnects` heard of each node's incarnation: an older heartbeat says less. */
  readonly #reconnects = new Map<string, number>();
  /** How each node last left the ring: saying so (`left`), or not heard for its lease (`silent`). */
  readonly #departures = new Map<string, "left" | "silent">();
  /** When each node's process started, as its heartbeats say (absent from older nodes). */
  readonly #startedAt = new Map<string, number>();
  /** When this process started. */
  readonly #started: number;
  /** The incarnation of each node forgotten for its silence: heard again, it was cut off, not restarted. */
  readonly #forgotten = new Map<string, string>();
  /** This process's incarnation when it is a counter node. */
  #incarnation = randomUUID();
  /** The incarnations this process announced, the current one last. */
  readonly #ownIncarnations = new Set<string>([this.#incarnation]);
  readonly #supersededListeners = new Set<SupersededListener>();
  #superseded = false;
  /** Another live process shares this node's id: said at most once per interval. */
  readonly #twinLog: LogThrottle;
  /** How often this process's bus came back, when it is a counter node. */
  #ownReconnects = 0;
  readonly #listeners = new Set<RingListener>();
  readonly #reconnectListeners = new Set<ReconnectListener>();
  #ring: HashRing;
  #sub: Subscription | undefined;
  #timer: TimerHandle | undefined;
  #leaving = false;
  /** Withdrawn from the ring for a while (cut off the bus alone): its heartbeats say `leaving`. */
  #withdrawn = false;

  constructor(opts: MembershipOptions) {
    this.#opts = opts;
    this.#started = opts.clock.now();
    this.#twinLog = new LogThrottle(LOG_REPEAT_MS, () => opts.clock.now());
    this.#ring = this.#build();
  }

  get ring(): HashRing {
    return this.#ring;
  }

  /**
   * How `node` last left the ring: `left` when it said so (a stop hands its partitions over), `silent`
   * when it was not heard for its lease; undefined if it never left.
   */
  departure(node: string): "left" | "silent" | undefined {
    return this.#departures.get(node);
  }

  /** When `node`'s process started, as its heartbeats say; undefined for a node of an older release. */
  startedAt(node: string): number | undefined {
    return this.#startedAt.get(node);
  }

  /** This process's incarnation: new at every start, and after `renewIncarnation()`. */
  get incarnation(): string {
    return this.#incarnation;
  }

  /**
   * Announces a new incarnation at once, as a restart would, for a node that lost presence state
   * without restarting (a partition's lease ran out and its actors were dropped): gateways resync
   * what they hold in a node's partitions when its incarnation changes.
   */
  renewIncarnation(): void {
    this.#incarnation = randomUUID();
    this.#ownIncarnations.add(this.#incarnation);
    if (this.#ownIncarnations.size > OWN_INCARNATIONS)
      this.#ownIncarnations.delete(this.#ownIncarnations.values().next().value!);
    this.#beat();
  }

  /**
   * This node's bus connection came back: what it published as the connection dropped may be
   * lost. Announced at once; gateways take fresh snapshots of its pages. Its presence state is
   * whole, so unlike `renewIncarnation` nobody resyncs.
   */
  reconnected(): void {
    this.#ownReconnects++;
    this.announce();
  }

  start(): void {
    const { bus, dc } = this.#opts;
    this.#sub = bus.subscribe(nodesSubject(dc), (data) => this.#onHeartbeat(data));
    if (this.#opts.self !== undefined) this.#lastSeen.set(this.#opts.self, this.#opts.clock.monotonic());
    this.#rebuild();
    this.#tick();
  }

  onChange(listener: RingListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Called with each node (same incarnation) heard to have reconnected its bus since last heard. */
  onReconnect(listener: ReconnectListener): () => void {
    this.#reconnectListeners.add(listener);
    return () => this.#reconnectListeners.delete(listener);
  }

  /** Called once if a later process announces this node's id (SupersededListener). */
  onSuperseded(listener: SupersededListener): () => void {
    this.#supersededListeners.add(listener);
    return () => this.#supersededListeners.delete(listener);
  }

  /** Announces this node now, between its regular heartbeats (a newcomer is waiting to learn the ring). */
  announce(): void {
    if (!this.#leaving) this.#beat();
  }

  /**
   * Takes this node off its peers' rings until `rejoin`: its heartbeats say `leaving` meanwhile,
   * so the first one heard after a cut drops it at once instead of putting it back on every ring
   * while it wants no partition (BusIsolation).
   */
  withdraw(): void {
    this.#withdrawn = true;
    this.#beat();
  }

  /** Back on its peers' rings: announced at once. */
  rejoin(): void {
    this.#withdrawn = false;
    this.#beat();
  }

  /** Announces that this node is leaving: peers drop it from the ring at once. */
  leave(): void {
    this.#leaving = true;
    this.#beat();
    if (this.#opts.self !== undefined) this.#lastSeen.delete(this.#opts.self);
    this.#rebuild();
  }

  stop(): void {
    this.#sub?.unsubscribe();
    if (this.#timer !== undefined) this.#opts.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #tick(): void {
    this.#beat();
    this.#expire();
    this.#timer = this.#opts.clock.setTimeout(() => this.#tick(), this.#opts.leaseMs / HEARTBEATS_PER_LEASE);
  }

  #beat(): void {
    const { self, bus, dc, leaseMs } = this.#opts;
    if (self === undefined) return;
    const state = this.#leaving || this.#withdrawn ? "leaving" : "up";
    const reconnects = this.#ownReconnects > 0 ? { reconnects: this.#ownReconnects } : {};
    bus.publish(
      nodesSubject(dc),
      encodeMessage({
        type: "node",
        node: self,
        incarnation: this.#incarnation,
        leaseMs,
        state,
        ...reconnects,
        startedAt: this.#started,
      }),
    );
  }

  #onHeartbeat(data: Uint8Array): void {
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (err) {
      this.#opts.logger.warn({ err }, "malformed node heartbeat");
      return;
    }
    if (msg.type !== "node" || (msg.node === this.#opts.self && this.#leaving)) return;
    // Another process under this node's id: it never stands for this one on the ring.
    if (msg.node === this.#opts.self && !this.#ownIncarnations.has(msg.incarnation)) {
      this.#heardTwin(msg);
      return;
    }
    if (msg.state === "leaving") {
      this.#departed(msg.node, "left");
      this.#forget(msg.node);
      this.#rebuild();
      return;
    }
    this.#lastSeen.set(msg.node, this.#opts.clock.monotonic());
    if (msg.startedAt !== undefined) this.#startedAt.set(msg.node, msg.startedAt);
    const before = this.#incarnations.get(msg.node);
    const returned = before === undefined && this.#forgotten.get(msg.node) === msg.incarnation;
    this.#forgotten.delete(msg.node);
    this.#incarnations.set(msg.node, msg.incarnation);
    this.#rebuild(before !== undefined && before !== msg.incarnation ? new Set([msg.node]) : NONE);
    const reconnects = msg.reconnects ?? 0;
    const heard = this.#reconnects.get(msg.node);
    // A node first heard, or restarted, starts its count here; a heartbeat the bus delivered late
    // (a thawed server passing on what it held) carries a lower one and says nothing.
    let cameBack = returned;
    if (before !== msg.incarnation || heard === undefined) this.#reconnects.set(msg.node, reconnects);
    else if (reconnects > heard) {
      this.#reconnects.set(msg.node, reconnects);
      cameBack = true;
    }
    if (cameBack && msg.node !== this.#opts.self)
      for (const listener of this.#reconnectListeners) listener(msg.node);
  }

  /**
   * The later of two live processes under one node id keeps it (the earlier one was replaced while
   * frozen or cut off); the earlier one stops when it hears the later. By their start times, each
   * by its own clock, ties going to the greater incarnation: both processes reach the same answer.
   * A successor's `leaving` heartbeats say nothing here: it hands over, as a restart does.
   */
  #heardTwin(msg: NodeHeartbeat): void {
    if (msg.state !== "up" || this.#superseded) return;
    const startedAt = msg.startedAt ?? 0;
    const self = { incarnation: this.#incarnation, startedAt: this.#started };
    if (isLaterTwin(self, { incarnation: msg.incarnation, startedAt })) {
      this.#superseded = true;
      for (const listener of this.#supersededListeners) listener({ incarnation: msg.incarnation, startedAt });
      return;
    }
    const suppressed = this.#twinLog.admit("twin");
    if (suppressed !== undefined)
      this.#opts.logger.error(
        { node: msg.node, incarnation: msg.incarnation, startedAt: msg.startedAt, suppressed },
        "another live process announces this node id; it started earlier and stops once it hears this one (LIVECOUNT_NODE_ID must be unique in a DC)",
      );
  }

  #departed(node: string, how: "left" | "silent"): void {
    this.#departures.delete(node);
    this.#departures.set(node, how);
    if (this.#departures.size > MAX_FORGOTTEN) this.#departures.delete(this.#departures.keys().next().value!);
  }

  #forget(node: string): void {
    this.#startedAt.delete(node);
    this.#lastSeen.delete(node);
    this.#incarnations.delete(node);
    this.#reconnects.delete(node);
  }

  #expire(): void {
    const now = this.#opts.clock.monotonic();
    const deadline = now - this.#opts.leaseMs;
    for (const [node, seen] of this.#lastSeen) {
      if (node === this.#opts.self && !this.#leaving) this.#lastSeen.set(node, now);
      else if (seen < deadline) {
        const incarnation = this.#incarnations.get(node);
        if (incarnation !== undefined) this.#forgotten.set(node, incarnation);
        // The oldest goes first: a node id per start (the default) would add one for every dead node.
        if (this.#forgotten.size > MAX_FORGOTTEN)
          this.#forgotten.delete(this.#forgotten.keys().next().value!);
        this.#departed(node, "silent");
        this.#forget(node);
      }
    }
    this.#rebuild();
  }

  #build(): HashRing {
    return new HashRing([...this.#lastSeen.keys()], {
      partitions: this.#opts.partitions,
      vnodes: this.#opts.vnodes,
    });
  }

  #rebuild(restarted: ReadonlySet<string> = NONE): void {
    const next = this.#build();
    if (next.equals(this.#ring) && restarted.size === 0) return;
    const previous = this.#ring;
    this.#ring = next;
    this.#opts.logger.info({ nodes: next.nodes, restarted: [...restarted] }, "ring changed");
    for (const listener of this.#listeners) listener(next, previous, restarted);
  }
}
