import { pack } from "msgpackr";
import { expect } from "vitest";
import {
  decodeNodeReply,
  decodeNodeRequest,
  encodeMessage,
  isNodeReply,
  isNodeRequest,
  type NodeReply,
  type NodeRequest,
} from "../src/index.js";
import { protocolErrorOf } from "./protocol_error_of.js";

/** Any value as msgpack, past the encoder's types: to build malformed messages. */
export const bytesOf = (v: unknown): Uint8Array => Uint8Array.from(pack(v));

/**
 * A batch request (also forwarded, with a hop) and its answer decode to what was encoded, each in
 * its category and refused in the other.
 */
export function expectBatchRoundTrip(request: NodeRequest, reply: NodeReply): void {
  expect(decodeNodeRequest(encodeMessage(request))).toEqual(request);
  expect(decodeNodeRequest(encodeMessage({ ...request, hop: 1 }))).toEqual({ ...request, hop: 1 });
  expect(decodeNodeReply(encodeMessage(reply))).toEqual(reply);
  expect(isNodeRequest(request)).toBe(true);
  expect(isNodeReply(reply)).toBe(true);
  protocolErrorOf(() => decodeNodeReply(encodeMessage(request)), "unknown_type");
  protocolErrorOf(() => decodeNodeRequest(encodeMessage(reply)), "unknown_type");
}
