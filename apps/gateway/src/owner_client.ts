import { BusTimeoutError, nodeSubject, type Bus } from "@livecount/bus";
import type { Membership } from "@livecount/cluster";
import {
  ProtocolError,
  decodeNodeReply,
  encodeMessage,
  replyTo,
  type NodeRequest,
  type ReplyTo,
} from "@livecount/protocol";

/**
 * Sends a request to the counter node that owns a partition, as the ring says, and returns the reply
 * type the request asks for. Failures come back as ProtocolError with a stable code: "unavailable"
 * when no node is live or the owner is moving, "timeout" when the owner did not answer, or the
 * owner's own error code.
 */
export class OwnerClient {
  constructor(
    private readonly bus: Bus,
    private readonly membership: Membership,
    private readonly dc: string,
    private readonly timeoutMs: number,
  ) {}

  /** Sends a request about `page` to the owner of the page's partition. */
  forPage<T extends NodeRequest>(page: string, request: T): Promise<ReplyTo<T>> {
    return this.request(this.membership.ring.partitionOf(page), request);
  }

  async request<T extends NodeRequest>(partition: number, request: T): Promise<ReplyTo<T>> {
    return this.toNode(this.#ownerOf(partition), request);
  }

  /** The node that owns `page`'s partition; throws ProtocolError("unavailable") when none is live. */
  ownerOfPage(page: string): string {
    return this.#ownerOf(this.membership.ring.partitionOf(page));
  }

  #ownerOf(partition: number): string {
    const owner = this.membership.ring.ownerOf(partition);
    if (owner === undefined) throw new ProtocolError("unavailable", "no counter node is live");
    return owner;
  }

  /** Sends a request to one counter node of this DC (by default within the client's timeout). */
  async toNode<T extends NodeRequest>(
    node: string,
    request: T,
    timeoutMs = this.timeoutMs,
  ): Promise<ReplyTo<T>> {
    let raw: Uint8Array;
    try {
      raw = await this.bus.request(nodeSubject(this.dc, node), encodeMessage(request), { timeoutMs });
    } catch (err) {
      throw new ProtocolError(err instanceof BusTimeoutError ? "timeout" : "unavailable", undefined, {
        cause: err,
      });
    }
    return replyTo(request, decodeNodeReply(raw));
  }
}
