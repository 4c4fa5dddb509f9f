import { ProtocolError } from "./errors.js";
import type { NodeReply, NodeRequest, RepliesByRequest, ReplyTo } from "./internal.js";

/** The reply type each request type expects. */
const EXPECTED: { readonly [K in keyof RepliesByRequest]: RepliesByRequest[K]["type"] } = {
  presence: "ack",
  presence_pages: "ack",
  presence_sync: "ack",
  presence_sync_part: "ack",
  snapshot: "page_state",
  snapshots: "page_states",
  increment: "incremented",
  increments: "increments_done",
  reset: "counter_reset",
  list_pages: "page_list",
  node_status: "node_info",
  purge: "purged",
  window: "window_total",
  stats: "page_stats",
};

/**
 * Narrows a decoded reply to what `request` asked for. An error reply throws its ProtocolError (its
 * stable code); a reply of another type is a peer's bug and throws ProtocolError("internal").
 */
export function replyTo<T extends NodeRequest>(request: T, reply: NodeReply): ReplyTo<T> {
  if (reply.type === "error") throw new ProtocolError(reply.code, reply.message);
  const expected = EXPECTED[request.type];
  if (reply.type !== expected)
    throw new ProtocolError("internal", `a ${request.type} request got a ${reply.type} reply`);
  // Checked just above: the reply's type is the one RepliesByRequest names for this request.
  return reply as ReplyTo<T>;
}
