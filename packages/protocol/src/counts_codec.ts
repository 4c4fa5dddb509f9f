/**
 * Encoding of `counts` frames (negotiated with the `livecount.counts` subprotocol). A gateway sends
 * one to each socket per coalescing window, carrying every changed page the socket watches: each
 * page's part is encoded once per window ({@link encodeCountsEntry}) and the parts are spliced into
 * each frame ({@link spliceCountsFrame}), so the cost per frame is a concatenation, not an encode.
 */
import { Packr } from "msgpackr";
import type { CountFrame, CountsFrame, Encoding, PageValue } from "./frames.js";

const packr = new Packr({ useRecords: false });

/** One page's part of a counts frame: `"page":{...}` for JSON, the key and value maps for msgpack. */
export type CountsEntry = string | Uint8Array;

/** A page's value in the field order of a count frame, without `type`, `page` and `ts`. */
function valueOf(v: PageValue): PageValue {
  return {
    viewers: v.viewers,
    ...(v.active !== undefined ? { active: v.active } : {}),
    ...(v.connections !== undefined ? { connections: v.connections } : {}),
    counters: v.counters,
    ...(v.dcs !== undefined ? { dcs: v.dcs } : {}),
    ...(v.lag_ms !== undefined ? { lag_ms: v.lag_ms } : {}),
  };
}

/** A copy of msgpackr's output, which is a view of a buffer it reuses. */
function pack(value: unknown): Uint8Array {
  return Uint8Array.from(packr.pack(value));
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  let size = 0;
  for (const p of parts) size += p.byteLength;
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/** msgpack's header of a map with `n` entries (fixmap, map16 or map32). */
function mapHeader(n: number): Uint8Array {
  if (n < 16) return Uint8Array.of(0x80 | n);
  if (n < 0x10000) return Uint8Array.of(0xde, n >> 8, n & 0xff);
  return Uint8Array.of(0xdf, (n >>> 24) & 0xff, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
}

/** `{"type":"counts","ts":` in msgpack: a map of three entries, then `type`, `counts` and the key `ts`. */
const MSGPACK_HEAD = concat([mapHeader(3), pack("type"), pack("counts"), pack("ts")]);
const MSGPACK_PAGES = pack("pages");

/**
 * The part of a counts frame for the page and value of `frame` (its `type` and `ts` are not part
 * of it). Encode it once per window and splice it into every frame that carries the page.
 */
export function encodeCountsEntry(frame: CountFrame, encoding: "json"): string;
export function encodeCountsEntry(frame: CountFrame, encoding: "msgpack"): Uint8Array;
export function encodeCountsEntry(frame: CountFrame, encoding: Encoding): CountsEntry;
export function encodeCountsEntry(frame: CountFrame, encoding: Encoding): CountsEntry {
  const value = valueOf(frame);
  return encoding === "json"
    ? `${JSON.stringify(frame.page)}:${JSON.stringify(value)}`
    : concat([pack(frame.page), pack(value)]);
}

/**
 * A counts frame of `ts` carrying `entries` (from {@link encodeCountsEntry}, each of another page,
 * all in `encoding`): `{"type":"counts","ts":ts,"pages":{...}}`.
 */
export function spliceCountsFrame(ts: number, entries: readonly CountsEntry[], encoding: "json"): string;
export function spliceCountsFrame(
  ts: number,
  entries: readonly CountsEntry[],
  encoding: "msgpack",
): Uint8Array;
export function spliceCountsFrame(
  ts: number,
  entries: readonly CountsEntry[],
  encoding: Encoding,
): string | Uint8Array;
export function spliceCountsFrame(
  ts: number,
  entries: readonly CountsEntry[],
  encoding: Encoding,
): string | Uint8Array {
  if (encoding === "json") return `{"type":"counts","ts":${ts},"pages":{${entries.join(",")}}}`;
  return concat([
    MSGPACK_HEAD,
    pack(ts),
    MSGPACK_PAGES,
    mapHeader(entries.length),
    ...(entries as readonly Uint8Array[]),
  ]);
}

/** Encodes a whole counts frame (for tests and clients; gateways splice entries instead). */
export function encodeCountsFrame(frame: CountsFrame, encoding: Encoding): string | Uint8Array {
  const entries = Object.entries(frame.pages).map(([page, value]) =>
    encodeCountsEntry({ type: "count", page, ts: frame.ts, ...value }, encoding),
  );
  return spliceCountsFrame(frame.ts, entries, encoding);
}
