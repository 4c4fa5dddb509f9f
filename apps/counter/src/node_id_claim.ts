import { BusTimeoutError, NoRespondersError, nodeSubject, type Bus } from "@livecount/bus";
import { decodeMessage, encodeMessage } from "@livecount/protocol";
import { HEARTBEATS_PER_LEASE } from "@livecount/cluster";
import { sleep, type Clock, type Logger } from "@livecount/runtime";
import type { CounterConfig } from "./counter_config.js";

/** A live counter node already runs under this node id: this one must not start. */
export class NodeIdInUseError extends Error {
  override name = "NodeIdInUseError";
}

/** How often a stopping predecessor is asked again whether it is gone. */
const STOPPING_POLL_MS = 100;

/**
 * Makes sure no live process serves the node's id before this one starts to: two processes under one id
 * take each other's partitions and answer each other's requests. It asks the node's own subject
 * for the node's status, before this process serves it:
 *
 * - no responder: the id is free. The usual start, and a restart after a crash: NATS drops a dead
 *   process's subscriptions with its connection.
 * - a status: a live process has the id; NodeIdInUseError. It keeps serving undisturbed.
 * - "stopping": a predecessor handing over (a supervisor that did not wait for its exit); asked
 *   again until it is gone, for up to two partition leases, then taken over as a restart does.
 * - no answer within a node heartbeat interval, or a bus failure: a process that holds the subscription and answers
 *   nothing (frozen, or on a host that died before NATS noticed). This one takes its place and its
 *   leases; should it thaw, it stops once it hears this one (Membership.onSuperseded).
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
  const giveUpAt = clock.now() + 2 * config.partitionLeaseMs;
  for (;;) {
    let reply;
    try {
      reply = decodeMessage(await bus.request(subject, request, { timeoutMs: answerMs }));
    } catch (err) {
      if (err instanceof NoRespondersError) return;
      logger.warn(
        { err, node: nodeId },
        err instanceof BusTimeoutError
          ? "a process holds this node id and does not answer (frozen?); taking its place"
          : "could not ask whether another process holds this node id; starting",
      );
      return;
    }
    if (reply.type === "node_info") {
      throw new NodeIdInUseError(
        `LIVECOUNT_NODE_ID ${nodeId} is in use by a live counter node (incarnation ${reply.incarnation}); ` +
          "node ids must be unique in a data center",
      );
    }
    if (clock.now() >= giveUpAt) {
      logger.warn({ node: nodeId }, "a process under this node id is still stopping; taking its place");
      return;
    }
    await sleep(clock, STOPPING_POLL_MS);
  }
}
