/**
 * The msgpack codec of bus messages (internal.ts). The bus is internal, but a decode must never
 * crash a process or let a malformed value into an actor: every message is checked field by field
 * and rebuilt from the known fields only (unknown fields are dropped, so a newer sender may add
 * some). Anything malformed throws ProtocolError("bad_frame").
 */
import { Packr, Unpackr, type Options } from "msgpackr";
import { ANTI_ENTROPY_DECODERS, pagesOf } from "./anti_entropy_codec.js";
import { APPLIED_KEYS_DECODERS } from "./applied_keys.js";
import { errorOf, incrementDecoders } from "./increment_codec.js";
import { presencePagesDecoders } from "./presence_pages.js";
import { pageStateOf, snapshotDecoders } from "./snapshot_batch.js";
import { ProtocolError } from "./errors.js";
import { isCounterName, isIdempotencyKey, isInternalId, isPageId, isPagePrefix } from "./ids.js";
import {
  MAX_LIST_PAGES,
  MAX_SYNC_PARTS,
  type Broadcast,
  type InternalMessage,
  type NodeReply,
  type NodeRequest,
} from "./internal.js";
import {
  entriesOf,
  entryOf,
  field,
  fieldsOf,
  isBoolean,
  isCounterKey,
  isNatural,
  isPositive,
  isSafeInteger,
  listOf,
  malformed,
  pageIdOf,
  partitionOf,
  presenceOpOf,
  pageRecordOf,
  recordOf,
  socketCountsOf,
  viewerKeysOf,
  naturalOf,
  optionalNaturals,
  type Fields,
} from "./internal_fields.js";
import { guardMsgpack } from "./msgpack_guard.js";
import { MAX_WINDOW_S } from "./windows.js";

/** A held partition and its lease's epoch: `[partition, epoch]`. */
function fenceOf(v: unknown): readonly [number, number] {
  if (!Array.isArray(v) || v.length !== 2 || !isNatural(v[0]) || !isNatural(v[1]))
    malformed("a partition entry is not [partition, epoch]");
  return [v[0] as number, v[1] as number];
}

/** The named per-page record when present, its values checked by `value`. */
function optionalRecord<T>(
  m: Fields,
  name: string,
  value: (v: unknown) => T,
): Record<string, Record<string, T>> {
  const v = m.get(name);
  return v === undefined ? {} : { [name]: pageRecordOf(v, isPageId, value, name) };
}

const isWindowSeconds = (v: unknown): v is number => isPositive(v) && v <= MAX_WINDOW_S;
const isListLimit = (v: unknown): v is number => isPositive(v) && v <= MAX_LIST_PAGES;
const isSyncParts = (v: unknown): v is number => isNatural(v) && v >= 2 && v <= MAX_SYNC_PARTS;

/** A resync's fields, whole (`presence_sync`) or a part of it (`presence_sync_part`). */
function syncFieldsOf(m: Fields) {
  return {
    gateway: field(m, "gateway", isInternalId),
    partition: field(m, "partition", isNatural),
    pages: pageRecordOf(m.get("pages"), isPageId, viewerKeysOf, "pages"),
    ...optionalRecord(m, "sockets", socketCountsOf),
    ...optionalRecord(m, "passive", viewerKeysOf),
    ...optionalRecord(m, "unvisited", viewerKeysOf),
    ...optionalNaturals(m, "reconnects"),
  };
}
const isGatewayState = (v: unknown): v is "up" | "down" => v === "up" || v === "down";
const isNodeState = (v: unknown): v is "up" | "leaving" => v === "up" || v === "leaving";

/** `skipValues` is documented in msgpackr's README but missing from its typings. */
interface PackOptions extends Options {
  readonly skipValues?: readonly unknown[];
}
// `undefined` fields are left out, as JSON.stringify does, so optional fields round-trip as absent.
const packOptions: PackOptions = { useRecords: false, skipValues: [undefined] };
const packr = new Packr(packOptions);
// Maps keep every key as sent, where objects would rename "__proto__": a valid page id and counter name.
const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: false, int64AsType: "number" });

/** Adds the forwarding count of a request when it has one; it is absent on most requests. */
function withHop(m: Fields, request: NodeRequest): NodeRequest {
  const hop = m.get("hop");
  if (hop === undefined) return request;
  if (!isNatural(hop)) malformed("field hop is malformed");
  return { ...request, hop };
}

const DECODERS: ReadonlyMap<string, (m: Fields) => InternalMessage> = new Map<
  string,
  (m: Fields) => InternalMessage
>([
  [
    "presence",
    (m) =>
      withHop(m, {
        type: "presence",
        gateway: field(m, "gateway", isInternalId),
        partition: field(m, "partition", isNatural),
        ops: listOf(m.get("ops"), presenceOpOf, "ops"),
        ...optionalNaturals(m, "reconnects"),
      }),
  ],
  ["presence_sync", (m) => withHop(m, { type: "presence_sync", ...syncFieldsOf(m) })],
  [
    "presence_sync_part",
    (m) => {
      const parts = field(m, "parts", isSyncParts);
      const part = field(m, "part", isNatural);
      if (part >= parts) malformed(`field part is ${part} of ${parts} parts`);
      return withHop(m, { type: "presence_sync_part", ...syncFieldsOf(m), part, parts });
    },
  ],
  ["snapshot", (m) => withHop(m, { type: "snapshot", page: field(m, "page", isPageId) })],
  [
    "reset",
    (m) =>
      withHop(m, {
        type: "reset",
        page: field(m, "page", isPageId),
        counter: field(m, "counter", isCounterName),
        key: field(m, "key", isIdempotencyKey),
        tombstone: field(m, "tombstone", isBoolean),
      }),
  ],
  [
    "list_pages",
    (m) => {
      const cursor = m.get("cursor");
      if (cursor !== undefined && !isPageId(cursor)) malformed("field cursor is malformed");
      return withHop(m, {
        type: "list_pages",
        prefix: field(m, "prefix", isPagePrefix),
        ...(cursor !== undefined ? { cursor } : {}),
        limit: field(m, "limit", isListLimit),
      });
    },
  ],
  ["node_status", () => ({ type: "node_status" })],
  ["purge", (m) => withHop(m, { type: "purge", olderThanMs: field(m, "olderThanMs", isNatural) })],
  [
    "window",
    (m) =>
      withHop(m, {
        type: "window",
        page: field(m, "page", isPageId),
        counter: field(m, "counter", isCounterName),
        seconds: field(m, "seconds", isWindowSeconds),
      }),
  ],
  ["stats", (m) => withHop(m, { type: "stats", page: field(m, "page", isPageId) })],
  [
    "page_stats",
    (m) => ({
      type: "page_stats",
      page: field(m, "page", isPageId),
      counters: recordOf(m.get("counters"), isCounterKey, entriesOf, "counters"),
      peak1h: field(m, "peak1h", isNatural),
      peak24h: field(m, "peak24h", isNatural),
      unique24h: field(m, "unique24h", isNatural),
      ts: field(m, "ts", isNatural),
    }),
  ],
  [
    "window_total",
    (m) => ({
      type: "window_total",
      page: field(m, "page", isPageId),
      counter: field(m, "counter", isCounterName),
      seconds: field(m, "seconds", isWindowSeconds),
      value: field(m, "value", isSafeInteger),
      ts: field(m, "ts", isNatural),
    }),
  ],
  ["ack", () => ({ type: "ack" })],
  ["page_state", pageStateOf],
  [
    "counter_reset",
    (m) => ({
      type: "counter_reset",
      page: field(m, "page", isPageId),
      counter: field(m, "counter", isCounterName),
      previous: field(m, "previous", isSafeInteger),
      updatedAt: field(m, "updatedAt", isNatural),
      duplicate: field(m, "duplicate", isBoolean),
    }),
  ],
  [
    "page_list",
    (m) => {
      const cursor = m.get("cursor");
      if (cursor !== undefined && !isPageId(cursor)) malformed("field cursor is malformed");
      return {
        type: "page_list",
        pages: listOf(m.get("pages"), pageIdOf, "pages"),
        ...(cursor !== undefined ? { cursor } : {}),
      };
    },
  ],
  [
    "node_info",
    (m) => ({
      type: "node_info",
      node: field(m, "node", isInternalId),
      incarnation: field(m, "incarnation", isInternalId),
      ready: field(m, "ready", isBoolean),
      partitions: listOf(m.get("partitions"), fenceOf, "partitions"),
      actors: field(m, "actors", isNatural),
      dirty: field(m, "dirty", isNatural),
      flushLagMs: field(m, "flushLagMs", isNatural),
      bootstrapped: field(m, "bootstrapped", isNatural),
      resyncing: recordOf(m.get("resyncing"), isInternalId, naturalOf, "resyncing"),
      ts: field(m, "ts", isNatural),
    }),
  ],
  [
    "purged",
    (m) => ({
      type: "purged",
      node: field(m, "node", isInternalId),
      before: field(m, "before", isNatural),
      pages: field(m, "pages", isNatural),
      counters: field(m, "counters", isNatural),
      kept: field(m, "kept", isNatural),
      failed: field(m, "failed", isNatural),
      waiting: field(m, "waiting", isNatural),
    }),
  ],
  ["error", errorOf],
  [
    "update",
    (m) => ({
      type: "update",
      page: field(m, "page", isPageId),
      dc: field(m, "dc", isInternalId),
      counters: recordOf(m.get("counters"), isCounterKey, entryOf, "counters"),
      ts: field(m, "ts", isNatural),
    }),
  ],
  [
    "updates",
    (m) => ({
      type: "updates",
      partition: partitionOf(m.get("partition")),
      pages: pagesOf(m.get("pages")),
      ts: field(m, "ts", isNatural),
      ...optionalNaturals(m, "taken"),
    }),
  ],
  [
    "gateway",
    (m) => ({
      type: "gateway",
      gateway: field(m, "gateway", isInternalId),
      leaseMs: field(m, "leaseMs", isPositive),
      state: field(m, "state", isGatewayState),
      ...optionalNaturals(m, "sockets", "viewers", "startedAt"),
      ...(m.get("node") !== undefined ? { node: field(m, "node", isInternalId) } : {}),
    }),
  ],
  [
    "node",
    (m) => ({
      type: "node",
      node: field(m, "node", isInternalId),
      incarnation: field(m, "incarnation", isInternalId),
      leaseMs: field(m, "leaseMs", isPositive),
      state: field(m, "state", isNodeState),
      ...optionalNaturals(m, "reconnects", "startedAt"),
    }),
  ],
  [
    "dc",
    (m) => ({
      type: "dc",
      dc: field(m, "dc", isInternalId),
      node: field(m, "node", isInternalId),
      seq: field(m, "seq", isNatural),
      leaseMs: field(m, "leaseMs", isPositive),
      ...optionalNaturals(m, "purgeBefore"),
      ...(m.get("acksKeys") !== undefined ? { acksKeys: field(m, "acksKeys", isBoolean) } : {}),
    }),
  ],
  ...incrementDecoders(withHop),
  ...snapshotDecoders(withHop),
  ...presencePagesDecoders(withHop),
  ...ANTI_ENTROPY_DECODERS,
  ...APPLIED_KEYS_DECODERS,
]);

const REQUEST_TYPES: ReadonlySet<string> = new Set([
  "presence",
  "presence_pages",
  "presence_sync",
  "presence_sync_part",
  "snapshot",
  "snapshots",
  "increment",
  "increments",
  "reset",
  "list_pages",
  "node_status",
  "purge",
  "window",
  "stats",
]);
const REPLY_TYPES: ReadonlySet<string> = new Set([
  "ack",
  "page_state",
  "page_states",
  "incremented",
  "increments_done",
  "counter_reset",
  "page_list",
  "node_info",
  "purged",
  "window_total",
  "page_stats",
  "error",
]);
const BROADCAST_TYPES: ReadonlySet<string> = new Set([
  "update",
  "updates",
  "gateway",
  "node",
  "dc",
  ...ANTI_ENTROPY_DECODERS.map(([type]) => type),
  ...APPLIED_KEYS_DECODERS.map(([type]) => type),
]);

export function isNodeRequest(msg: InternalMessage): msg is NodeRequest {
  return REQUEST_TYPES.has(msg.type);
}

export function isNodeReply(msg: InternalMessage): msg is NodeReply {
  return REPLY_TYPES.has(msg.type);
}

export function isBroadcast(msg: InternalMessage): msg is Broadcast {
  return BROADCAST_TYPES.has(msg.type);
}

/**
 * Encodes a bus message as msgpack. Not validated: the types are the contract, and the receiver
 * validates. The bytes are a view of a shared buffer that is never overwritten: never mutate them.
 */
export function encodeMessage(msg: InternalMessage): Uint8Array {
  return packr.pack(msg);
}

/** Decodes and validates a bus message. Throws ProtocolError("bad_frame") on anything malformed. */
export function decodeMessage(data: Uint8Array): InternalMessage {
  let decoded: unknown;
  try {
    guardMsgpack(data);
    decoded = unpackr.unpack(data);
  } catch (err) {
    if (err instanceof ProtocolError) throw err;
    throw new ProtocolError("bad_frame", "message is not valid msgpack", { cause: err });
  }
  const m = fieldsOf(decoded, "message");
  const type = m.get("type");
  const decoder = typeof type === "string" ? DECODERS.get(type) : undefined;
  // Gateways tell an owner of an earlier release by these words (presence_forwarder.ts): keep them.
  if (decoder === undefined) malformed(`unknown message type ${JSON.stringify(type)}`);
  return decoder(m);
}

function decodeAs<T extends InternalMessage>(
  data: Uint8Array,
  is: (msg: InternalMessage) => msg is T,
  what: string,
): T {
  const msg = decodeMessage(data);
  if (!is(msg)) throw new ProtocolError("unknown_type", `expected ${what}, got ${msg.type}`);
  return msg;
}

/** Decodes a request to a counter node; another valid message throws ProtocolError("unknown_type"). */
export function decodeNodeRequest(data: Uint8Array): NodeRequest {
  return decodeAs(data, isNodeRequest, "a node request");
}

/** Decodes a counter node's reply; another valid message throws ProtocolError("unknown_type"). */
export function decodeNodeReply(data: Uint8Array): NodeReply {
  return decodeAs(data, isNodeReply, "a node reply");
}

/** Decodes a broadcast; another valid message throws ProtocolError("unknown_type"). */
export function decodeBroadcast(data: Uint8Array): Broadcast {
  return decodeAs(data, isBroadcast, "a broadcast");
}
