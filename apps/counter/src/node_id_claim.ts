import {
  BusDisconnectedError,
  BusTimeoutError,
  NoRespondersError,
  nodeSubject,
  type Bus,
} from "@livecount/bus";
import { HEARTBEATS_PER_LEASE } from "@livecount/cluster";
import { decodeNodeReply, encodeMessage } from "@livecount/protocol";
import { sleep, type Clock, type Logger } from "@livecount/runtime";
import type { CounterConfig } from "./counter_config.js";

/** A live counter node already runs under this node id: this one must not start. */
export class NodeIdInUseError extends Error {
  override name = "NodeIdInUseError";
}

/** Whether another process holds the node id could not be learnt: the start fails rather than guess. */
export class NodeIdUnknownError extends Error {
  override name = "NodeIdUnknownError";
}

/** How often the node's subject is asked again while the answer is "stopping" or the bus is down. */
const RETRY_MS = 100;

/**
 * Makes sure no live process serves the node's id before this one starts to: two processes under
 * one id take each other's partitions and answer each other's requests. It asks the node's own
 * subject for the node's status, before this process serves it:
 *
 * - no responder: the id is free. The usual start, and a restart after a crash: NATS drops a dead
 *   process's subscriptions with its connection.
 * - a status, or any other answer: a live process has the id; NodeIdInUseError. It keeps serving
 *   undisturbed.
 * - "stopping": a predecessor handing over (a supervisor that did not wait for its exit); asked
 *   again until it is gone, for up to two partition leases, then taken over as a restart does.
 * - no answer: a process that holds the subscription and answers nothing. Asked again for a whole
 *   node lease (the time its peers give it before they drop it from the ring), so a live node
 *   stalled for a moment answers one of them; silent all along, it is frozen (or on a host that died
 *   before NATS noticed), and this one takes its place and its leases. Should it thaw, it stops once
 *   it hears this one (Membership.onSuperseded).
 * - the bus down: asked again for a node lease, then NodeIdUnknownError. Starting blind could take
 *   a live node's partitions.
 */
export async function claimNodeId(
  bus: Bus,
  clock: Clock,
  logger: Logger,
  config: CounterConfig,
): Promise<void> {
  const { dc, nodeId } = config;
  const subject = nodeSubject(dc, nodeId);
  const request = encodeMessage({ type: "node_status" });
  const answerMs = config.nodeLeaseMs / HEARTBEATS_PER_LEASE;
  const stoppingUntil = clock.monotonic() + 2 * config.partitionLeaseMs;
  /** When the node's subject first went unanswered, or the bus first failed. */
  let silentSince: number | undefined;
  let downSince: number | undefined;
  for (;;) {
    let reply;
    try {
      reply = decodeNodeReply(await bus.request(subject, request, { timeoutMs: answerMs }));
      downSince = undefined;
    } catch (err) {
      if (err instanceof NoRespondersError) return;
      if (err instanceof BusTimeoutError) {
        downSince = undefined;
        silentSince ??= clock.monotonic() - answerMs;
        if (clock.monotonic() - silentSince >= config.nodeLeaseMs) {
          logger.warn(
            { node: nodeId },
            "a process holds this node id and has not answered for a node lease; taking its place",
          );
          return;
        }
        continue;
      }
      if (!(err instanceof BusDisconnectedError)) throw inUse(nodeId, `it answered: ${String(err)}`);
      downSince ??= clock.monotonic();
      if (clock.monotonic() - downSince >= config.nodeLeaseMs)
        throw new NodeIdUnknownError(
          `could not ask NATS whether a live counter node holds LIVECOUNT_NODE_ID ${nodeId}`,
          { cause: err },
        );
      await sleep(clock, RETRY_MS);
      continue;
    }
    if (reply.type === "node_info") throw inUse(nodeId, `incarnation ${reply.incarnation}`);
    if (reply.type !== "error" || reply.code !== "unavailable")
      throw inUse(nodeId, `it answered ${reply.type}`);
    // A predecessor stopping: it unsubscribes once it has handed its partitions over.
    silentSince = undefined;
    if (clock.monotonic() >= stoppingUntil) {
      logger.warn({ node: nodeId }, "a process under this node id is still stopping; taking its place");
      return;
    }
    await sleep(clock, RETRY_MS);
  }
}

function inUse(nodeId: string, detail: string): NodeIdInUseError {
  return new NodeIdInUseError(
    `LIVECOUNT_NODE_ID ${nodeId} is in use by a live counter node (${detail}); node ids must be unique in a data center`,
  );
}
