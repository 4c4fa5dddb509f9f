/**
 * A structural check of msgpack bytes before they reach the decoder. Our frames and messages only
 * use nil, booleans, numbers, strings, arrays and maps. Everything else msgpackr understands
 * (extensions: dates, records, typed arrays, regexps, errors, structured-clone references; binary)
 * is refused here, except the fixext 1 of type 0 that msgpack encoders write for `undefined`; so
 * are nesting deeper than any message needs and lengths that claim more items than there are bytes
 * left. One iterative pass, no allocation beyond a small stack.
 */
import { ProtocolError } from "./errors.js";

/** Deepest nesting accepted; the deepest message (a page state) nests 4 levels. */
export const MSGPACK_MAX_DEPTH = 16;

const FIXMAP_MAX = 0x8f;
const FIXARRAY_MAX = 0x9f;
const FIXSTR_MAX = 0xbf;
const NEGATIVE_FIXINT_MIN = 0xe0;
const POSITIVE_FIXINT_MAX = 0x7f;
const UNDEFINED_EXTENSION = 0x00;

function reject(reason: string): never {
  throw new ProtocolError("bad_frame", `malformed msgpack: ${reason}`);
}

/** Throws ProtocolError("bad_frame") unless `bytes` hold exactly one plain msgpack value. */
export function guardMsgpack(bytes: Uint8Array, maxDepth: number = MSGPACK_MAX_DEPTH): void {
  const end = bytes.length;
  /** Items still to read in each enclosing container. */
  const open: number[] = [];
  let pending = 1;
  let pos = 0;

  const uint = (size: number): number => {
    if (pos + size > end) reject("truncated length");
    let v = 0;
    for (let i = 0; i < size; i++) v = v * 256 + bytes[pos++]!;
    return v;
  };

  while (true) {
    while (pending === 0) {
      const outer = open.pop();
      if (outer === undefined) {
        if (pos !== end) reject("trailing bytes");
        return;
      }
      pending = outer;
    }
    pending--;
    if (pos >= end) reject("truncated");
    const token = bytes[pos++]!;
    /** Items of a container that starts here. */
    let items = 0;
    /** Payload bytes after the header; added after the switch because `uint` itself moves `pos`. */
    let skip = 0;
    if (token <= POSITIVE_FIXINT_MAX || token >= NEGATIVE_FIXINT_MIN) {
      // fixint
    } else if (token <= FIXMAP_MAX) {
      items = (token & 0x0f) * 2;
    } else if (token <= FIXARRAY_MAX) {
      items = token & 0x0f;
    } else if (token <= FIXSTR_MAX) {
      skip = token & 0x1f;
    } else {
      switch (token) {
        case 0xc0: // nil
        case 0xc2: // false
        case 0xc3: // true
          break;
        case 0xcc: // uint 8
        case 0xd0: // int 8
          skip = 1;
          break;
        case 0xcd: // uint 16
        case 0xd1: // int 16
          skip = 2;
          break;
        case 0xca: // float 32
        case 0xce: // uint 32
        case 0xd2: // int 32
          skip = 4;
          break;
        case 0xcb: // float 64
        case 0xcf: // uint 64
        case 0xd3: // int 64
          skip = 8;
          break;
        case 0xd9: // str 8
          skip = uint(1);
          break;
        case 0xda: // str 16
          skip = uint(2);
          break;
        case 0xdb: // str 32
          skip = uint(4);
          break;
        case 0xdc: // array 16
          items = uint(2);
          break;
        case 0xdd: // array 32
          items = uint(4);
          break;
        case 0xde: // map 16
          items = uint(2) * 2;
          break;
        case 0xdf: // map 32
          items = uint(4) * 2;
          break;
        case 0xd4: // fixext 1: only extension 0, which msgpackr and notepack write for undefined
          if (bytes[pos] !== UNDEFINED_EXTENSION) reject("unsupported extension");
          skip = 2;
          break;
        default:
          reject(`unsupported type 0x${token.toString(16)}`);
      }
    }
    pos += skip;
    if (pos > end) reject("truncated");
    if (items > 0) {
      // Every item takes at least one byte, so a length beyond the bytes left is a lie.
      if (items > end - pos) reject("length exceeds data");
      if (open.length >= maxDepth) reject("nested too deeply");
      open.push(pending);
      pending = items;
    }
  }
}
