/**
 * MessagePack written by hand, for the few messages a process writes thousands of times a second
 * (page updates, a flush's entry writes): the same bytes as msgpackr writes for the same values
 * (its "preferred" sizes, integers past 32 bits as float64, its UTF-8), without its generic steps
 * per value and per call. Everything else goes through msgpackr. Callers write validated values:
 * `natural` takes non-negative safe integers (anything else comes out as a float64, which msgpackr
 * would write smaller), `integer` safe integers of either sign, and records have no undefined
 * values (msgpackr left those out; here they throw).
 *
 * Messages are written one after another into a buffer and returned as views of it: a message is
 * never overwritten (a full buffer is left to the views that hold it, and a new one started), so a
 * view may wait in a socket's queue.
 */

/** Bytes of each buffer: a few dozen messages of a flush or page update share one. */
const SLAB_BYTES = 16_384;

/** The most bytes `s` takes as a msgpack string, header included. */
export const stringBound = (s: string): number => 5 + 3 * s.length;

/** The most bytes any number, boolean or container header takes. */
export const VALUE_BOUND = 9;

export class MsgpackWriter {
  #slab = new Uint8Array(SLAB_BYTES);
  #view = new DataView(this.#slab.buffer);
  /** The slab as a Buffer where there is one (Node): its native UTF-8 writer, as msgpackr uses it. */
  #bytes = bufferOf(this.#slab);
  readonly #encoder = new TextEncoder();
  #at = 0;
  #start = 0;

  /** Starts a message of at most `bound` bytes (stringBound, VALUE_BOUND). */
  begin(bound: number): void {
    if (SLAB_BYTES - this.#at < bound) {
      this.#slab = new Uint8Array(Math.max(SLAB_BYTES, bound));
      this.#view = new DataView(this.#slab.buffer);
      this.#bytes = bufferOf(this.#slab);
      this.#at = 0;
    }
    this.#start = this.#at;
  }

  /** The message written since `begin`. */
  end(): Uint8Array {
    return this.#slab.subarray(this.#start, this.#at);
  }

  /** Bytes already encoded (a constant part). */
  raw(bytes: Uint8Array): void {
    const slab = this.#slab;
    let at = this.#at;
    for (let i = 0; i < bytes.length; i++) slab[at++] = bytes[i]!;
    this.#at = at;
  }

  map(n: number): void {
    this.#header(n, 0x80, 0xde, 0xdf);
  }

  array(n: number): void {
    this.#header(n, 0x90, 0xdc, 0xdd);
  }

  #header(n: number, fix: number, n16: number, n32: number): void {
    if (n < 0x10) this.#slab[this.#at++] = fix | n;
    else if (n < 0x10000) {
      this.#slab[this.#at] = n16;
      this.#view.setUint16(this.#at + 1, n);
      this.#at += 3;
    } else {
      this.#slab[this.#at] = n32;
      this.#view.setUint32(this.#at + 1, n);
      this.#at += 5;
    }
  }

  /** A PN-counter entry, `{p, n}`: a map of two naturals. */
  entry(e: { readonly p: number; readonly n: number }): void {
    this.map(2);
    this.raw(P_KEY);
    this.natural(e.p);
    this.raw(N_KEY);
    this.natural(e.n);
  }

  boolean(b: boolean): void {
    this.#slab[this.#at++] = b ? 0xc3 : 0xc2;
  }

  /** A non-negative integer: the smallest uint, a float64 past 32 bits (as msgpackr writes them). */
  natural(v: number): void {
    const slab = this.#slab;
    const at = this.#at;
    if (v >>> 0 !== v) {
      slab[at] = 0xcb;
      this.#view.setFloat64(at + 1, v);
      this.#at = at + 9;
    } else if (v < 0x80) {
      slab[at] = v;
      this.#at = at + 1;
    } else if (v < 0x100) {
      slab[at] = 0xcc;
      slab[at + 1] = v;
      this.#at = at + 2;
    } else if (v < 0x10000) {
      slab[at] = 0xcd;
      this.#view.setUint16(at + 1, v);
      this.#at = at + 3;
    } else {
      slab[at] = 0xce;
      this.#view.setUint32(at + 1, v);
      this.#at = at + 5;
    }
  }

  /** A safe integer of either sign: negative ones as the smallest int (msgpackr's sizes), float64 past 32 bits. */
  integer(v: number): void {
    if (v >= 0 || v >> 0 !== v) return this.natural(v);
    const slab = this.#slab;
    const at = this.#at;
    if (v >= -0x20) {
      slab[at] = 0x100 + v;
      this.#at = at + 1;
    } else if (v >= -0x80) {
      slab[at] = 0xd0;
      slab[at + 1] = 0x100 + v;
      this.#at = at + 2;
    } else if (v >= -0x8000) {
      slab[at] = 0xd1;
      this.#view.setInt16(at + 1, v);
      this.#at = at + 3;
    } else {
      slab[at] = 0xd2;
      this.#view.setInt32(at + 1, v);
      this.#at = at + 5;
    }
  }

  /** A string: its UTF-8 bytes after a header of their length (fixstr, str8, str16 or str32). */
  string(s: string): void {
    const slab = this.#slab;
    const at = this.#at;
    const n = s.length;
    // A header for one byte a unit (ids and counter names are ASCII), moved below if the bytes need another.
    const header = n < 0x20 ? 1 : n < 0x100 ? 2 : n < 0x10000 ? 3 : 5;
    // As msgpackr writes: Node's UTF-8 writer from 64 units on (U+FFFD for a lone surrogate), its
    // own loop below (a lone surrogate as three bytes).
    const bytes = n >= 0x40 ? this.#native(s, at + header) : this.#short(s, at + header);
    const need = bytes < 0x20 ? 1 : bytes < 0x100 ? 2 : bytes < 0x10000 ? 3 : 5;
    if (need !== header) slab.copyWithin(at + need, at + header, at + header + bytes);
    if (need === 1) slab[at] = 0xa0 | bytes;
    else if (need === 2) {
      slab[at] = 0xd9;
      slab[at + 1] = bytes;
    } else if (need === 3) {
      slab[at] = 0xda;
      this.#view.setUint16(at + 1, bytes);
    } else {
      slab[at] = 0xdb;
      this.#view.setUint32(at + 1, bytes);
    }
    this.#at = at + need + bytes;
  }

  /**
   * A string of fewer than 64 units written at `to`; returns its bytes. From 32 units Node's native
   * writer is the faster for ASCII (a stored answer's JSON); what it wrote as more bytes than units
   * was not ASCII, and is written again as msgpackr's loop writes it.
   */
  #short(s: string, to: number): number {
    const n = s.length;
    if (n >= 0x20 && this.#native(s, to) === n) return n;
    const slab = this.#slab;
    let i = 0;
    for (let c: number; i < n && (c = s.charCodeAt(i)) < 0x80; i++) slab[to + i] = c;
    return i < n ? utf8(s, i, slab, to + i) - to : n;
  }

  /** `s` as UTF-8 at `to` by the platform (U+FFFD for a lone surrogate); returns its bytes. */
  #native(s: string, to: number): number {
    return this.#bytes !== undefined
      ? this.#bytes.write(s, to)
      : this.#encoder.encodeInto(s, this.#slab.subarray(to)).written;
  }
}

/** A Buffer over `slab`'s memory in Node; elsewhere none (TextEncoder writes instead). */
function bufferOf(slab: Uint8Array): Buffer | undefined {
  return typeof Buffer === "function"
    ? Buffer.from(slab.buffer, slab.byteOffset, slab.byteLength)
    : undefined;
}

/** UTF-8 of `s` from unit `from`, written at `to`, as msgpackr's loop writes it; returns where it ended. */
function utf8(s: string, from: number, out: Uint8Array, to: number): number {
  let at = to;
  for (let i = from; i < s.length; i++) {
    let c = s.charCodeAt(i);
    let next: number;
    if (c < 0x80) out[at++] = c;
    else if (c < 0x800) {
      out[at++] = (c >> 6) | 0xc0;
      out[at++] = (c & 0x3f) | 0x80;
    } else if ((c & 0xfc00) === 0xd800 && ((next = s.charCodeAt(i + 1)) & 0xfc00) === 0xdc00) {
      c = 0x10000 + ((c & 0x03ff) << 10) + (next & 0x03ff);
      i++;
      out[at++] = (c >> 18) | 0xf0;
      out[at++] = ((c >> 12) & 0x3f) | 0x80;
      out[at++] = ((c >> 6) & 0x3f) | 0x80;
      out[at++] = (c & 0x3f) | 0x80;
    } else {
      out[at++] = (c >> 12) | 0xe0;
      out[at++] = ((c >> 6) & 0x3f) | 0x80;
      out[at++] = (c & 0x3f) | 0x80;
    }
  }
  return at;
}

/** ASCII strings as msgpack fixstrs, one after another: constant parts of a message. */
export function fixstrs(...parts: string[]): Uint8Array {
  return Uint8Array.from(parts.flatMap((s) => [0xa0 | s.length, ...Array.from(s, (c) => c.charCodeAt(0))]));
}

const P_KEY = fixstrs("p");
const N_KEY = fixstrs("n");
