/**
 * Both sides of the gateway heartbeat: a gateway announces its incarnation on `lc.gateways.<dc>`
 * every third of its lease (and `down` when it stops); counter nodes listen and keep
 * `GatewayLeases`. While heartbeats arrive, a gateway's presence contributions are alive.
 *
 * A gateway also answers on its own subject (`lc.gateway.<dc>.<incarnation>`) while it runs, so a
 * counter node that hears a restarted gateway can ask whether the earlier incarnation is still
 * there: no responder means its process is gone (the broker dropped its subscriptions with its
 * connection), and its viewers need not be held until it misses a heartbeat. It answers on its node
 * id's subject too, and listens to the DC's gateway heartbeats for another process under its id
 * (gateway_id.ts).
 */
import {
  gatewaySubject,
  gatewaysSubject,
  NoRespondersError,
  type Bus,
  type Subscription,
} from "@livecount/bus";
import { decodeMessage, encodeMessage, type GatewayHeartbeat } from "@livecount/protocol";
import { LOG_REPEAT_MS, LogThrottle, type Clock, type Logger, type TimerHandle } from "@livecount/runtime";
import { HEARTBEATS_PER_LEASE } from "./cluster_config.js";
import { serveGatewayId, type GatewayIdHolder } from "./gateway_id.js";
import { isLaterTwin } from "./twins.js";

export interface GatewayHeartbeatOptions {
  readonly bus: Bus;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly dc: string;
  /** The gateway's incarnation: a new one every process start. */
  readonly gateway: string;
  /**
   * Its LIVECOUNT_NODE_ID, stable across restarts, and when this incarnation started: owners let an
   * earlier incarnation of the same node go as soon as they hear this one.
   */
  readonly node: string;
  readonly startedAt: number;
  readonly leaseMs: number;
  /**
   * A heartbeat went out so late (the process did not run: GC, SIGSTOP, starved) that owners may
   * have let the lease lapse and dropped its viewers: the gateway gives them everything again.
   */
  readonly onStall: (silentMs: number) => void;
  /**
   * An owner that let this incarnation go (its heartbeats came late there, or a probe found nothing
   * while the bus blipped) asks whether it runs: that owner dropped its viewers and takes it back on
   * the answer, so the gateway gives the owners everything again (`resyncAll`, at most once a
   * heartbeat interval: a refused resync is retried until every owner that asked has taken it back).
   * The answer carries its count of bus reconnects: what a NATS server passes on late with a lower
   * one is older than the resync, and the owner drops it.
   */
  readonly released?: { resyncAll(): void; readonly reconnects: number };
  /**
   * A process started later beats under this node id: this one was replaced while frozen or cut
   * off (or both started at once), and stops. Called once. With it, a gateway frozen for a lease
   * listens for such a process before it beats again, and yields to any it hears then.
   */
  readonly onSuperseded?: (by: GatewayIdHolder) => void;
  /** After every heartbeat (metrics). */
  readonly onBeat?: () => void;
  /** What the heartbeat reports of the gateway (the status API shows it). */
  readonly stats?: () => { readonly sockets: number; readonly viewers: number };
}

/** A heartbeat later than this share of the lease means owners may have expired the gateway. */
const STALL_FACTOR = 2 / 3;
/**
 * Heartbeat intervals a gateway frozen for a lease listens for another process under its id before
 * it beats again: every live one beats once an interval, and one more half lets its beat arrive.
 */
const THAW_LISTEN_INTERVALS = 1.5;

/** The gateway side: announces the incarnation until stopped. */
export class GatewayHeartbeatSender {
  readonly #o: GatewayHeartbeatOptions;
  readonly #intervalMs: number;
  #timer: TimerHandle | undefined;
  /** When (monotonic) the last heartbeat went out; 0 before the first. */
  #lastBeatAt = 0;
  #presence: Subscription | undefined;
  /** The node id's subject, and the DC's gateway heartbeats (for a twin): while started. */
  #idSubscriptions: Subscription[] = [];
  #superseded = false;
  /** When (monotonic) this process found it was frozen for a lease, until it beats again. */
  #thawedAt: number | undefined;
  readonly #twinLog: LogThrottle;
  /** When (monotonic) an owner's probe of a released incarnation last started a resync. */
  #releasedAt = -Infinity;

  constructor(options: GatewayHeartbeatOptions) {
    this.#o = options;
    this.#intervalMs = Math.floor(options.leaseMs / HEARTBEATS_PER_LEASE);
    this.#twinLog = new LogThrottle(LOG_REPEAT_MS, () => options.clock.monotonic());
  }

  /** Answers presence probes, then beats: an owner hearing this incarnation can always find it. */
  start(): void {
    const { bus, dc, gateway } = this.#o;
    this.#presence ??= bus.serve(gatewaySubject(dc, gateway), (asked) => {
      if (asked[0] !== RELEASED_PROBE[0]) return ALIVE;
      this.#released();
      return new TextEncoder().encode(String(this.#o.released?.reconnects ?? 0));
    });
    if (this.#idSubscriptions.length === 0) {
      const self = { incarnation: gateway, startedAt: this.#o.startedAt };
      this.#idSubscriptions = [
        serveGatewayId(bus, dc, this.#o.node, self),
        listenToGateways(bus, dc, this.#o.logger, (beat) => this.#heard(beat)),
      ];
    }
    this.#beat("up");
  }

  /** Announces `down`: owners drop the gateway at once and its viewers linger for the grace window. */
  stop(): void {
    if (this.#timer !== undefined) this.#o.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#beat("down");
    this.#presence?.unsubscribe();
    this.#presence = undefined;
    for (const subscription of this.#idSubscriptions.splice(0)) subscription.unsubscribe();
  }

  /** A gateway heartbeat of the DC: another live process under this node id? */
  #heard(beat: GatewayHeartbeat): void {
    const { node, gateway, startedAt } = this.#o;
    if (beat.node !== node || beat.gateway === gateway || beat.state !== "up" || this.#superseded) return;
    const self = { incarnation: gateway, startedAt };
    const other = { incarnation: beat.gateway, startedAt: beat.startedAt ?? 0 };
    // Just thawed from a lease-long freeze, whatever the starts say: that one has the id now.
    if (this.#thawedAt !== undefined || isLaterTwin(self, other)) {
      this.#superseded = true;
      this.#o.onSuperseded?.(other);
      return;
    }
    this.#twinLog.log(
      this.#o.logger,
      "error",
      { node, incarnation: other.incarnation, startedAt: other.startedAt },
      "another live gateway announces this node id; it started earlier and stops once it hears this one (LIVECOUNT_NODE_ID must be unique per gateway process)",
    );
  }

  #released(): void {
    const now = this.#o.clock.monotonic();
    if (this.#superseded) return;
    if (now - this.#releasedAt < this.#intervalMs) return;
    this.#releasedAt = now;
    this.#o.logger.warn("an owner let this gateway go; resyncing presence");
    this.#o.released?.resyncAll();
  }

  #beat(state: "up" | "down"): void {
    const { bus, clock, dc, gateway, node, startedAt, leaseMs } = this.#o;
    // Monotonic: a wall clock stepped back during a freeze must not hide the stall.
    const now = clock.monotonic();
    const silentMs = now - this.#lastBeatAt;
    if (state === "up" && this.#superseded) return;
    const stalled = this.#lastBeatAt > 0 && silentMs > STALL_FACTOR * leaseMs;
    if (state === "up" && stalled && this.#thawedAt === undefined) {
      this.#o.logger.warn({ silentMs }, "gateway stalled; resyncing presence");
      // One resync covers an owner's probe that comes with it (#released).
      this.#releasedAt = now;
      this.#o.onStall(silentMs);
      if (silentMs >= leaseMs && this.#o.onSuperseded !== undefined) {
        // Frozen for a whole lease: another process may have taken this node id meanwhile
        // (gateway_id.ts). Listening first, it yields to any it hears before it beats; beating at
        // once, a process whose clock runs ahead would look the later one and stop the live one.
        this.#thawedAt = now;
        this.#timer = clock.setTimeout(() => this.#beat("up"), THAW_LISTEN_INTERVALS * this.#intervalMs);
        return;
      }
    }
    this.#thawedAt = undefined;
    this.#lastBeatAt = now;
    const beat: GatewayHeartbeat = {
      type: "gateway",
      gateway,
      node,
      startedAt,
      leaseMs,
      state,
      ...this.#o.stats?.(),
    };
    bus.publish(gatewaysSubject(dc), encodeMessage(beat));
    this.#o.onBeat?.();
    if (state === "up") this.#timer = clock.setTimeout(() => this.#beat("up"), this.#intervalMs);
  }
}

const ALIVE = new Uint8Array(0);
/** The probe of an owner that let the incarnation go (an empty one: a restart asking about its siblings). */
const RELEASED_PROBE = Uint8Array.of(1);

/** What a probe learnt of a gateway incarnation. */
export type GatewayPresence = "alive" | "gone" | "unknown";

/**
 * Asks an incarnation this owner let go whether it still runs (as `probeGateway`); a running one
 * resyncs its presence (GatewayHeartbeatOptions.released) and answers with its count of bus
 * reconnects (0 from gateways of earlier releases, which answer with nothing).
 */
export async function probeReleasedGateway(
  bus: Bus,
  dc: string,
  gateway: string,
  timeoutMs: number,
): Promise<{ readonly presence: GatewayPresence; readonly reconnects: number }> {
  try {
    const answer = await bus.request(gatewaySubject(dc, gateway), RELEASED_PROBE, { timeoutMs });
    const reconnects = Number(new TextDecoder().decode(answer));
    return {
      presence: "alive",
      reconnects: Number.isSafeInteger(reconnects) && reconnects > 0 ? reconnects : 0,
    };
  } catch (err) {
    return { presence: err instanceof NoRespondersError ? "gone" : "unknown", reconnects: 0 };
  }
}

/**
 * Asks whether gateway incarnation `gateway` of `dc` still runs: "alive" when it answers, "gone"
 * when nothing serves its subject (its process ended, or predates probes and was restarted),
 * "unknown" when the answer did not come within `timeoutMs` or the bus is down (then only its
 * heartbeats tell). Never rejects.
 */
export async function probeGateway(
  bus: Bus,
  dc: string,
  gateway: string,
  timeoutMs: number,
): Promise<GatewayPresence> {
  try {
    await bus.request(gatewaySubject(dc, gateway), ALIVE, { timeoutMs });
    return "alive";
  } catch (err) {
    return err instanceof NoRespondersError ? "gone" : "unknown";
  }
}

/** The counter node side: every well-formed gateway heartbeat of the DC goes to `handler`. */
export function listenToGateways(
  bus: Bus,
  dc: string,
  logger: Logger,
  handler: (beat: GatewayHeartbeat) => void,
): Subscription {
  return bus.subscribe(gatewaysSubject(dc), (data) => {
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (err) {
      logger.warn({ err }, "malformed gateway heartbeat");
      return;
    }
    if (msg.type === "gateway") handler(msg);
  });
}
