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

const KEY_BYTES = 16;
/** Bits of a `register()` value that hold the rank (at most HLL_MAX_RANK, below 64). */
export const RANK_BITS = 6;
export const RANK_MASK = (1 << RANK_BITS) - 1;
/** Viewer keys are printable ASCII (protocol ids.ts): one byte a character. */
const SCRATCH_BYTES = VIEWER_KEY_MAX_LENGTH;

export class VisitorHash {
  readonly #key: Uint8Array;
  readonly #out = new Uint8Array(8);
  readonly #scratch = new Uint8Array(SCRATCH_BYTES);
  /** `#scratch`'s first n bytes at [n], made once: a view per arrival was most of what hashing allocated. */
  readonly #prefixes = Array.from({ length: SCRATCH_BYTES + 1 }, (_, n) => this.#scratch.subarray(0, n));
  readonly #view = new DataView(this.#out.buffer);
  readonly #encoder = new TextEncoder();

  /** `secret`: LIVECOUNT_VISITOR_KEY, the same in every DC. */
  constructor(secret: string) {
    this.#key = createHash("sha256").update(secret).digest().subarray(0, KEY_BYTES);
  }

  /**
   * The register `viewer` falls in and its rank there, as one number, `index << RANK_BITS | rank`:
   * it runs for every arrival, and the caller keeps a number per raised register, not an object.
   */
  register(viewer: string): number {
    const { read, written } = this.#encoder.encodeInto(viewer, this.#scratch);
    // Longer than any valid key: hashed all the same, from a buffer of its own.
    const bytes = read === viewer.length ? this.#prefixes[written]! : Buffer.from(viewer, "utf8");
    siphash24(bytes, this.#key, this.#out, true);
    const { index, rank } = registerOf(this.#view.getUint32(0, true), this.#view.getUint32(4, true));
    return (index << RANK_BITS) | rank;
  }
}
