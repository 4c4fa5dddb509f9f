/**
 * Where a viewer id falls among a page's unique-visitor registers (HyperLogLog, crdt hyperloglog.ts):
 * a keyed hash, so that nobody without LIVECOUNT_VISITOR_KEY can pick ids that land where they want
 * (all in one register, or each in a fresh one). It runs for every viewer that arrives on a page.
 *
 * SipHash-2-4 is the keyed function made for this job (short inputs, resistance to chosen inputs
 * under a secret key), at a tenth of the cost of an HMAC-SHA256 object per id. The 16-byte SipHash
 * key is the first half of SHA-256 of the configured secret, so every character of it counts and
 * every DC with the same secret places ids alike (registers merge across DCs).
 */
import { registerOf } from "@livecount/crdt";
import { VIEWER_KEY_MAX_LENGTH } from "@livecount/protocol";
import { createHash } from "node:crypto";
import siphash24 from "siphash24";
import instantiate from "siphash24/siphash24.js";

const KEY_BYTES = 16;
/** Bits of a `register()` value that hold the rank (at most HLL_MAX_RANK, below 64). */
export const RANK_BITS = 6;
export const RANK_MASK = (1 << RANK_BITS) - 1;
/**
 * Where the package's WebAssembly reads its input and key and writes the 8-byte result (siphash24's
 * index.js: the result at 0, the key at 8, the message from 24).
 */
const KEY_AT = 8;
const DATA_AT = 24;

export class VisitorHash {
  readonly #key: Uint8Array;
  /** SipHash-2-4 of the `length` bytes at `at` of this instance's memory, under the key at KEY_AT. */
  readonly #siphash: (at: number, length: number) => void;
  /** This instance's memory from DATA_AT, a viewer key long (printable ASCII, protocol ids.ts). */
  readonly #input: Uint8Array;
  readonly #result: DataView;

  /** `secret`: LIVECOUNT_VISITOR_KEY, the same in every DC. */
  constructor(secret: string) {
    this.#key = createHash("sha256").update(secret).digest().subarray(0, KEY_BYTES);
    // A WebAssembly instance of its own, its key written once: the package's function copies the
    // key and the message in, and the result out through a new view, on every call (a view per
    // arrival was a tenth of the bytes the counter node allocated under load). It needs WebAssembly,
    // as the package's own function does unless it falls back to JavaScript (`node --jitless`).
    const wasm = instantiate();
    const memory = new Uint8Array(wasm.memory.buffer);
    memory.set(this.#key, KEY_AT);
    this.#siphash = wasm.siphash;
    this.#input = memory.subarray(DATA_AT, DATA_AT + VIEWER_KEY_MAX_LENGTH);
    this.#result = new DataView(wasm.memory.buffer, 0, 8);
  }

  /**
   * The register `viewer` falls in and its rank there, as one number, `index << RANK_BITS | rank`:
   * it runs for every arrival, and the caller keeps a number per raised register, not an object.
   */
  register(viewer: string): number {
    const n = viewer.length;
    const input = this.#input;
    let ascii = n <= input.length;
    for (let i = 0; ascii && i < n; i++) {
      const c = viewer.charCodeAt(i);
      input[i] = c;
      ascii = c < 0x80;
    }
    if (ascii) {
      this.#siphash(DATA_AT, n);
      return packed(this.#result.getUint32(0, true), this.#result.getUint32(4, true));
    }
    // A key no valid viewer has (longer, or not ASCII): hashed by the package, as its UTF-8 bytes.
    const out = siphash24(Buffer.from(viewer, "utf8"), this.#key, undefined, true);
    const view = new DataView(out.buffer, out.byteOffset, 8);
    return packed(view.getUint32(0, true), view.getUint32(4, true));
  }
}

/** The register a 64-bit hash (two little-endian halves) picks and its rank there, as one number. */
function packed(low: number, high: number): number {
  const { index, rank } = registerOf(low, high);
  return (index << RANK_BITS) | rank;
}
