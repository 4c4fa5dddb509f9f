/**
 * Protocol v1 codecs: client frames are decoded and validated here, once, at the edge; server
 * frames are encoded here. Text frames carry JSON, binary frames msgpack of the same shapes.
 * Decoders throw nothing but ProtocolError, whatever the input.
 */
import { Packr, Unpackr } from "msgpackr";
import { ProtocolError } from "./errors.js";
import { encodeCountsFrame } from "./counts_codec.js";
import type { ClientFrame, CountFrame, Encoding, ErrorFrame, PageValue, ServerFrame } from "./frames.js";
import { TOKEN_MAX_LENGTH, isCounterName, isPageId, isTokenShape, isViewerId } from "./ids.js";
import { guardMsgpack } from "./msgpack_guard.js";

/**
 * Largest client frame accepted, in bytes (in UTF-16 code units for a frame given as a string). The
 * largest valid frame, a join with a 128-character page and viewer fully JSON-escaped, is under
 * 600 bytes; the rest is room for fields a newer client may add. A larger frame is answered
 * `payload_too_large`; gateways close a socket only past protocol v1's 16 KiB frame limit.
 */
export const CLIENT_FRAME_MAX_BYTES = 4096;
/** A frame type echoed in an error message is cut to this many characters. */
const ECHOED_TYPE_MAX_LENGTH = 32;

const utf8 = new TextDecoder("utf-8", { fatal: true });
const packr = new Packr({ useRecords: false });
const clientUnpackr = new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: "number" });
// Maps keep every key as sent, where objects would rename "__proto__", a valid counter name.
const mapUnpackr = new Unpackr({ useRecords: false, mapsAsObjects: false, int64AsType: "number" });

type RawFrame = Record<string, unknown>;

function badFrame(message: string, cause?: unknown): ProtocolError {
  return new ProtocolError("bad_frame", message, cause === undefined ? undefined : { cause });
}

function asBytes(data: ArrayBuffer | Uint8Array): Uint8Array {
  return ArrayBuffer.isView(data) ? data : new Uint8Array(data);
}

function sizeOf(data: ArrayBuffer | Uint8Array | string): number {
  return typeof data === "string" ? data.length : data.byteLength;
}

function parseJson(data: ArrayBuffer | Uint8Array | string): unknown {
  let text: string;
  if (typeof data === "string") {
    text = data;
  } else {
    try {
      text = utf8.decode(data);
    } catch (err) {
      throw badFrame("frame is not valid UTF-8", err);
    }
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw badFrame("frame is not valid JSON", err);
  }
}

function parseMsgpack(data: ArrayBuffer | Uint8Array | string, unpackr: Unpackr): unknown {
  if (typeof data === "string") throw badFrame("msgpack frames must be binary");
  const bytes = asBytes(data);
  guardMsgpack(bytes);
  try {
    return unpackr.unpack(bytes);
  } catch (err) {
    throw badFrame("frame is not valid msgpack", err);
  }
}

/** A plain object: what JSON.parse or msgpackr make of a map, not an array or a class instance. */
function isPlainObject(v: unknown): v is RawFrame {
  if (typeof v !== "object" || v === null) return false;
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
}

/** Runs `fn`, turning anything it throws that is not a ProtocolError into a bad_frame. */
function guarded<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof ProtocolError) throw err;
    throw badFrame("frame could not be decoded", err);
  }
}

function frameType(frame: unknown): string {
  if (!isPlainObject(frame)) throw badFrame("frame must be an object");
  const type = frame.type;
  if (typeof type !== "string") throw badFrame("frame must have a string type");
  return type;
}

function unknownType(type: string): ProtocolError {
  return new ProtocolError(
    "unknown_type",
    `unknown frame type ${JSON.stringify(type.slice(0, ECHOED_TYPE_MAX_LENGTH))}`,
  );
}

function pageOf(frame: RawFrame): string {
  const page = frame.page;
  if (!isPageId(page)) throw new ProtocolError("invalid_page");
  return page;
}

/** The optional `token` of a join or watch: absent, or a compact JWS of bounded length. */
function tokenOf(raw: RawFrame, page: string): { token?: string } {
  const token = raw.token;
  if (token === undefined) return {};
  if (!isTokenShape(token))
    throw new ProtocolError(
      "unauthorized",
      `token must be a JWT (compact JWS) of at most ${TOKEN_MAX_LENGTH} characters`,
      { page },
    );
  return { token };
}

function toClientFrame(frame: unknown): ClientFrame {
  const type = frameType(frame);
  const raw = frame as RawFrame;
  switch (type) {
    case "join": {
      const page = pageOf(raw);
      const viewer = raw.viewer;
      if (viewer !== undefined && !isViewerId(viewer)) throw new ProtocolError("invalid_viewer");
      const active = raw.active;
      if (active !== undefined && typeof active !== "boolean") throw badFrame("active must be a boolean");
      return {
        type,
        page,
        ...(viewer !== undefined ? { viewer } : {}),
        ...tokenOf(raw, page),
        ...(active !== undefined ? { active } : {}),
      };
    }
    case "active": {
      const page = raw.page === undefined ? undefined : pageOf(raw);
      if (typeof raw.active !== "boolean") throw badFrame("active must be a boolean");
      return page === undefined ? { type, active: raw.active } : { type, page, active: raw.active };
    }
    case "watch": {
      const page = pageOf(raw);
      return { type, page, ...tokenOf(raw, page) };
    }
    case "leave":
    case "unwatch":
      return { type, page: pageOf(raw) };
    case "ping":
      return { type };
    default:
      throw unknownType(type);
  }
}

/**
 * Decodes and validates one client frame: JSON for `json`, msgpack for `msgpack`. Returns a fresh
 * frame holding only the known fields; unknown fields are ignored. Throws ProtocolError only:
 * payload_too_large, bad_frame (not UTF-8, JSON or msgpack; not an object with a string `type`),
 * unknown_type, invalid_page, invalid_viewer, unauthorized (a `token` that is not a bounded compact
 * JWS; the error carries the page). The input is only read during the call.
 */
export function decodeClientFrame(data: ArrayBuffer | Uint8Array | string, encoding: Encoding): ClientFrame {
  return guarded(() => {
    if (sizeOf(data) > CLIENT_FRAME_MAX_BYTES) throw new ProtocolError("payload_too_large");
    const parsed = encoding === "json" ? parseJson(data) : parseMsgpack(data, clientUnpackr);
    return toClientFrame(parsed);
  });
}

/** Encodes a client frame (for clients, the SDK and tests). */
export function encodeClientFrame(frame: ClientFrame, encoding: "json"): string;
export function encodeClientFrame(frame: ClientFrame, encoding: "msgpack"): Uint8Array;
export function encodeClientFrame(frame: ClientFrame, encoding: Encoding): string | Uint8Array;
export function encodeClientFrame(frame: ClientFrame, encoding: Encoding): string | Uint8Array {
  let canonical: ClientFrame;
  switch (frame.type) {
    case "join":
      canonical = {
        type: frame.type,
        page: frame.page,
        ...(frame.viewer !== undefined ? { viewer: frame.viewer } : {}),
        ...(frame.token !== undefined ? { token: frame.token } : {}),
        ...(frame.active !== undefined ? { active: frame.active } : {}),
      };
      break;
    case "active":
      canonical =
        frame.page === undefined
          ? { type: frame.type, active: frame.active }
          : { type: frame.type, page: frame.page, active: frame.active };
      break;
    case "watch":
      canonical = {
        type: frame.type,
        page: frame.page,
        ...(frame.token !== undefined ? { token: frame.token } : {}),
      };
      break;
    case "leave":
    case "unwatch":
      canonical = { type: frame.type, page: frame.page };
      break;
    case "ping":
      canonical = { type: frame.type };
      break;
  }
  return encode(canonical, encoding);
}

function encode(value: object, encoding: Encoding): string | Uint8Array {
  return encoding === "json" ? JSON.stringify(value) : packr.pack(value);
}

/**
 * Encodes a count frame. Count frames are encoded once per page update and the same bytes go to
 * every watcher, so this does no validation and no copying of `counters`. Msgpack bytes are a view
 * of a shared buffer: never mutate them, and do not retain them longer than needed.
 */
export function encodeCountFrame(frame: CountFrame, encoding: "json"): string;
export function encodeCountFrame(frame: CountFrame, encoding: "msgpack"): Uint8Array;
export function encodeCountFrame(frame: CountFrame, encoding: Encoding): string | Uint8Array;
export function encodeCountFrame(frame: CountFrame, encoding: Encoding): string | Uint8Array {
  const canonical: CountFrame = {
    type: "count",
    page: frame.page,
    viewers: frame.viewers,
    ...(frame.active !== undefined ? { active: frame.active } : {}),
    ...(frame.connections !== undefined ? { connections: frame.connections } : {}),
    counters: frame.counters,
    ts: frame.ts,
    ...(frame.dcs !== undefined ? { dcs: frame.dcs } : {}),
    ...(frame.lag_ms !== undefined ? { lag_ms: frame.lag_ms } : {}),
  };
  return encode(canonical, encoding);
}

/** Encodes a server frame: a JSON string for `json`, msgpack bytes for `msgpack`. */
export function encodeServerFrame(frame: ServerFrame, encoding: "json"): string;
export function encodeServerFrame(frame: ServerFrame, encoding: "msgpack"): Uint8Array;
export function encodeServerFrame(frame: ServerFrame, encoding: Encoding): string | Uint8Array;
export function encodeServerFrame(frame: ServerFrame, encoding: Encoding): string | Uint8Array {
  switch (frame.type) {
    case "count":
      return encodeCountFrame(frame, encoding);
    case "counts":
      return encodeCountsFrame(frame, encoding);
    case "error": {
      const canonical: ErrorFrame =
        frame.page === undefined
          ? { type: frame.type, code: frame.code, message: frame.message }
          : { type: frame.type, code: frame.code, message: frame.message, page: frame.page };
      return encode(canonical, encoding);
    }
    case "pong":
      return encode({ type: frame.type }, encoding);
  }
}

/** Rebuilds msgpack maps as plain objects, keeping keys such as "__proto__" as own properties. */
function mapsToObjects(v: unknown): unknown {
  if (v instanceof Map) {
    const entries: [string, unknown][] = [];
    for (const [key, value] of v) {
      if (typeof key !== "string") throw badFrame("map keys must be strings");
      entries.push([key, mapsToObjects(value)]);
    }
    return Object.fromEntries(entries);
  }
  return Array.isArray(v) ? v.map(mapsToObjects) : v;
}

function isCount(v: unknown): v is number {
  return Number.isSafeInteger(v) && (v as number) >= 0;
}

function toCounters(v: unknown): Record<string, number> {
  if (!isPlainObject(v)) throw badFrame("counters must be an object");
  const entries = Object.entries(v);
  for (const [name, value] of entries) {
    if (!isCounterName(name)) throw new ProtocolError("invalid_counter");
    if (!Number.isSafeInteger(value)) throw badFrame(`counter ${name} must be a safe integer`);
  }
  return Object.fromEntries(entries) as Record<string, number>;
}

/** A page's value (of a count frame, or of one page of a counts frame), checked. */
function toPageValue(raw: RawFrame): PageValue {
  const { viewers, active, connections, counters, dcs, lag_ms } = raw;
  if (!isCount(viewers)) throw badFrame("viewers must be a non-negative safe integer");
  if (active !== undefined && !isCount(active)) throw badFrame("active must be a non-negative safe integer");
  if (connections !== undefined && !isCount(connections))
    throw badFrame("connections must be a non-negative safe integer");
  if (dcs !== undefined && !(Array.isArray(dcs) && dcs.every((d) => typeof d === "string"))) {
    throw badFrame("dcs must be a list of data center ids");
  }
  if (lag_ms !== undefined && !isCount(lag_ms)) throw badFrame("lag_ms must be a non-negative safe integer");
  return {
    viewers,
    ...(active !== undefined ? { active } : {}),
    ...(connections !== undefined ? { connections } : {}),
    counters: toCounters(counters),
    ...(dcs !== undefined ? { dcs: dcs as string[] } : {}),
    ...(lag_ms !== undefined ? { lag_ms } : {}),
  };
}

function toServerFrame(frame: unknown): ServerFrame {
  const type = frameType(frame);
  const raw = frame as RawFrame;
  switch (type) {
    case "count": {
      if (!isCount(raw.ts)) throw badFrame("ts must be a non-negative safe integer");
      return { type, page: pageOf(raw), ...toPageValue(raw), ts: raw.ts };
    }
    case "counts": {
      const { ts, pages } = raw;
      if (!isCount(ts)) throw badFrame("ts must be a non-negative safe integer");
      if (!isPlainObject(pages)) throw badFrame("pages must be an object");
      const entries = Object.entries(pages).map(([page, value]): [string, PageValue] => {
        if (!isPageId(page)) throw new ProtocolError("invalid_page");
        if (!isPlainObject(value)) throw badFrame("a page's value must be an object");
        return [page, toPageValue(value)];
      });
      return { type, ts, pages: Object.fromEntries(entries) };
    }
    case "error": {
      const { code, message, page } = raw;
      if (typeof code !== "string" || code.length === 0) throw badFrame("code must be a non-empty string");
      if (typeof message !== "string") throw badFrame("message must be a string");
      if (page === undefined) return { type, code, message };
      return { type, code, message, page: pageOf(raw) };
    }
    case "pong":
      return { type };
    default:
      throw unknownType(type);
  }
}

/**
 * Decodes and validates one server frame (for clients, the SDK and tests). Error codes are not
 * checked against the table: a newer server may send codes this version does not know.
 */
export function decodeServerFrame(data: ArrayBuffer | Uint8Array | string, encoding: Encoding): ServerFrame {
  return guarded(() => {
    const parsed = encoding === "json" ? parseJson(data) : mapsToObjects(parseMsgpack(data, mapUnpackr));
    return toServerFrame(parsed);
  });
}
