/**
 * One gateway process per node id (LIVECOUNT_NODE_ID) in a DC. Owners count each incarnation apart,
 * so two live gateways under one id count right for a while, but an owner that hears one lets the
 * other go as a restart's predecessor whenever that one is slow to beat (a stall, a bus blip), and
 * its viewers stop counting until it resyncs. Every gateway answers on its id's subject
 * (`lc.gatewayid.<dc>.<node>`) with its incarnation and start while it runs, and a starting gateway
 * asks there before it beats or takes a socket (`claimGatewayId`):
 *
 * - no responder: the id is free. The usual start, and a restart after a crash: NATS drops a dead
 *   process's subscriptions with its connection.
 * - an answer: a live gateway has the id; GatewayIdInUseError, and the process exits 1. The live
 *   one keeps serving undisturbed.
 * - no answer: a process that holds the subscription and answers nothing (frozen, or on a host that
 *   died before NATS noticed; or a NATS server that passes nothing on). Asked again for a whole
 *   gateway lease, so one stalled for a moment answers; silent all along, this one takes its place,
 *   as owners do once it misses its lease.
 * - the bus disconnected: asked again for a lease, then GatewayIdUnknownError. Starting blind could
 *   disturb a live gateway.
 *
 * Two started at the same moment hear each other's heartbeats (`isLaterTwin`): the one that started
 * earlier stops, as a counter node does (membership.ts). A gateway that finds it was frozen for a
 * lease listens for a heartbeat under its id before it beats again, and yields to any it hears
 * then, whatever their clocks say (GatewayHeartbeatSender). Gateways of releases before this one
 * serve no id's subject: a new gateway under such a live one's id starts, and logs it as an error.
 */
import {
  BusDisconnectedError,
  BusTimeoutError,
  NoRespondersError,
  ResponderError,
  gatewayIdSubject,
  type Bus,
  type Subscription,
} from "@livecount/bus";
import { sleep, type Clock, type Logger } from "@livecount/runtime";
import { HEARTBEATS_PER_LEASE } from "./cluster_config.js";

/** The gateway process running under a node id, as it answers on the id's subject. */
export interface GatewayIdHolder {
  readonly incarnation: string;
  /** Its start, by its own wall clock. */
  readonly startedAt: number;
}

/** A live gateway runs under this node id already: this one must not start. */
export class GatewayIdInUseError extends Error {
  override name = "GatewayIdInUseError";
}

/** Whether another gateway holds the node id could not be learnt: the start fails rather than guess. */
export class GatewayIdUnknownError extends Error {
  override name = "GatewayIdUnknownError";
}

/** How often the id's subject is asked again while the bus is down. */
const RETRY_MS = 100;
const ASK = new Uint8Array(0);

/** Answers for `holder` on its node id's subject until unsubscribed. */
export function serveGatewayId(bus: Bus, dc: string, node: string, holder: GatewayIdHolder): Subscription {
  const answer = new TextEncoder().encode(JSON.stringify(holder));
  return bus.serve(gatewayIdSubject(dc, node), () => answer);
}

/** The holder an answer names, or undefined for one that names none (any other answer still proves a live process). */
function holderOf(answer: Uint8Array): GatewayIdHolder | undefined {
  try {
    const value: unknown = JSON.parse(new TextDecoder().decode(answer));
    if (typeof value !== "object" || value === null) return undefined;
    const { incarnation, startedAt } = value as Record<string, unknown>;
    if (typeof incarnation !== "string" || typeof startedAt !== "number") return undefined;
    return { incarnation, startedAt };
  } catch {
    return undefined;
  }
}

function inUse(node: string, dc: string, holder: GatewayIdHolder | undefined): GatewayIdInUseError {
  const which =
    holder === undefined
      ? "a live process"
      : `incarnation ${holder.incarnation}, started ${new Date(holder.startedAt).toISOString()}`;
  return new GatewayIdInUseError(
    `gateway node id ${node} is in use in ${dc} by ${which}; LIVECOUNT_NODE_ID must be unique per gateway process`,
  );
}

export interface GatewayIdClaimOptions {
  readonly dc: string;
  /** LIVECOUNT_NODE_ID. */
  readonly node: string;
  /** LIVECOUNT_GATEWAY_LEASE_MS: how long a silent holder is asked before this one takes its place. */
  readonly leaseMs: number;
}

/** Resolves once no live gateway holds the node id; see the module's comment for each answer. */
export async function claimGatewayId(
  bus: Bus,
  clock: Clock,
  logger: Logger,
  o: GatewayIdClaimOptions,
): Promise<void> {
  const subject = gatewayIdSubject(o.dc, o.node);
  const answerMs = o.leaseMs / HEARTBEATS_PER_LEASE;
  /** Asks in a row that went unanswered, each for a heartbeat interval; when the bus first failed (monotonic). */
  let unanswered = 0;
  let downSince: number | undefined;
  for (;;) {
    let answer: Uint8Array;
    try {
      answer = await bus.request(subject, ASK, { timeoutMs: answerMs });
    } catch (err) {
      if (err instanceof NoRespondersError) return;
      const now = clock.monotonic();
      if (err instanceof BusTimeoutError) {
        downSince = undefined;
        // Counted, not timed: a lease of 10 s makes intervals of 3,333.3 ms, which timers round down.
        if (++unanswered < HEARTBEATS_PER_LEASE) continue;
        logger.warn(
          { node: o.node, unanswered, answerMs },
          "a process holds this gateway node id and has not answered for a gateway lease; taking its place",
        );
        return;
      }
      // A responder that failed is a live process all the same; anything else is this process's.
      if (err instanceof ResponderError) throw inUse(o.node, o.dc, undefined);
      if (!(err instanceof BusDisconnectedError)) throw err;
      downSince ??= now;
      if (now - downSince >= o.leaseMs)
        throw new GatewayIdUnknownError(
          `could not learn whether gateway node id ${o.node} is in use: the bus has been down for ${Math.round(now - downSince)} ms`,
        );
      await sleep(clock, RETRY_MS);
      continue;
    }
    throw inUse(o.node, o.dc, holderOf(answer));
  }
}
