/**
 * Both sides of the gateway heartbeat: a gateway announces its incarnation on `lc.gateways.<dc>`
 * every third of its lease (and `down` when it stops); counter nodes listen and keep
 * `GatewayLeases`. While heartbeats arrive, a gateway's presence contributions are alive.
 */
import { gatewaysSubject, type Bus, type Subscription } from "@livecount/bus";
import { decodeMessage, encodeMessage, type GatewayHeartbeat } from "@livecount/protocol";
import type { Clock, Logger, TimerHandle } from "@livecount/runtime";
import { HEARTBEATS_PER_LEASE } from "./cluster_config.js";

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
  /** After every heartbeat (metrics). */
  readonly onBeat?: () => void;
  /** What the heartbeat reports of the gateway (the status API shows it). */
  readonly stats?: () => { readonly sockets: number; readonly viewers: number };
}

/** A heartbeat later than this share of the lease means owners may have expired the gateway. */
const STALL_FACTOR = 2 / 3;

/** The gateway side: announces the incarnation until stopped. */
export class GatewayHeartbeatSender {
  readonly #o: GatewayHeartbeatOptions;
  readonly #intervalMs: number;
  #timer: TimerHandle | undefined;
  #lastBeatAt = 0;

  constructor(options: GatewayHeartbeatOptions) {
    this.#o = options;
    this.#intervalMs = Math.floor(options.leaseMs / HEARTBEATS_PER_LEASE);
  }

  start(): void {
    this.#beat("up");
  }

  /** Announces `down`: owners drop the gateway at once and its viewers linger for the grace window. */
  stop(): void {
    if (this.#timer !== undefined) this.#o.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#beat("down");
  }

  #beat(state: "up" | "down"): void {
    const { bus, clock, dc, gateway, node, startedAt, leaseMs } = this.#o;
    const now = clock.now();
    const silentMs = now - this.#lastBeatAt;
    if (state === "up" && this.#lastBeatAt > 0 && silentMs > STALL_FACTOR * leaseMs) {
      this.#o.logger.warn({ silentMs }, "gateway stalled; resyncing presence");
      this.#o.onStall(silentMs);
    }
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
