import { nodeSubject, type Bus } from "@livecount/bus";
import type { Membership } from "@livecount/cluster";
import {
  ProtocolError,
  decodeNodeReply,
  encodeMessage,
  type NodeReply,
  type NodeRequest,
} from "@livecount/protocol";

/**
 * Sends a request to the counter node that owns a partition, as the ring says. Failures come back
 * as ProtocolError with a stable code: "unavailable" when no node is live or the owner is moving,
 * "timeout" when the owner did not answer.
 */
export class OwnerClient {
  constructor(
    private readonly bus: Bus,
    private readonly membership: Membership,
    private readonly dc: string,
    private readonly timeoutMs: number,
  ) {}

  /** Sends a request about `page` to the owner of the page's partition. */
  forPage(page: string, request: NodeRequest): Promise<NodeReply> {
    return this.request(this.membership.ring.partitionOf(page), request);
  }

  async request(partition: number, request: NodeRequest): Promise<NodeReply> {
    const owner = this.membership.ring.ownerOf(partition);
    if (owner === undefined) throw new ProtocolError("unavailable", "no counter node is live");
    let raw: Uint8Array;
    try {
      raw = await this.bus.request(nodeSubject(this.dc, owner), encodeMessage(request), {
        timeoutMs: this.timeoutMs,
      });
    } catch (err) {
      const timedOut = err instanceof Error && err.name === "BusTimeoutError";
      throw new ProtocolError(timedOut ? "timeout" : "unavailable", undefined, { cause: err });
    }
    const reply = decodeNodeReply(raw);
    if (reply.type === "error") throw new ProtocolError(reply.code, reply.message);
    return reply;
  }
}
