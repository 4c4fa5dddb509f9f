/**
 * MurmurHash3, x86 32-bit variant (Austin Appleby, public domain), over the UTF-8 bytes of a
 * string. Pure integer arithmetic on 32-bit values, so every process on every platform computes
 * the same hash: partitions and ring positions depend on it, and changing it moves every page.
 */

const C1 = 0xcc9e2d51;
const C2 = 0x1b873593;
const BLOCK_ADD = 0xe6546b64;
const FMIX1 = 0x85ebca6b;
const FMIX2 = 0xc2b2ae35;
/** Worst case UTF-8 bytes per UTF-16 code unit. */
const MAX_UTF8_BYTES_PER_UNIT = 3;
const INITIAL_SCRATCH_BYTES = 512;

const encoder = new TextEncoder();
/** Reused encode buffer: hashing runs once per routed message, so it must not allocate. */
let scratch = new Uint8Array(INITIAL_SCRATCH_BYTES);

function rotl32(x: number, r: number): number {
  return (x << r) | (x >>> (32 - r));
}

function scrambleBlock(k: number): number {
  return Math.imul(rotl32(Math.imul(k, C1), 15), C2);
}

/** The unsigned 32-bit MurmurHash3 of `length` bytes of `bytes`, from offset 0. */
export function murmur3Bytes(bytes: Uint8Array, length: number = bytes.length, seed = 0): number {
  let h = seed | 0;
  const tail = length & ~3;
  for (let i = 0; i < tail; i += 4) {
    const k = bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24);
    h ^= scrambleBlock(k);
    h = (Math.imul(rotl32(h, 13), 5) + BLOCK_ADD) | 0;
  }
  const rest = length & 3;
  if (rest > 0) {
    let k = bytes[tail]!;
    if (rest > 1) k |= bytes[tail + 1]! << 8;
    if (rest > 2) k |= bytes[tail + 2]! << 16;
    h ^= scrambleBlock(k);
  }
  h ^= length;
  h ^= h >>> 16;
  h = Math.imul(h, FMIX1);
  h ^= h >>> 13;
  h = Math.imul(h, FMIX2);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * The unsigned 32-bit MurmurHash3 of the UTF-8 encoding of `s`. Lone surrogates encode as U+FFFD,
 * as TextEncoder does everywhere.
 */
export function murmur3(s: string, seed = 0): number {
  const needed = s.length * MAX_UTF8_BYTES_PER_UNIT;
  if (needed > scratch.length) scratch = new Uint8Array(needed);
  const { written } = encoder.encodeInto(s, scratch);
  return murmur3Bytes(scratch, written, seed);
}
