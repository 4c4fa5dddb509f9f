/**
 * HyperLogLog (Flajolet et al., 2007) for counting distinct visitors: 2^12 registers, a standard
 * error of 1.04 / sqrt(4096) = 1.6%. A register holds the largest rank seen among the items hashed
 * to it, so registers merge by max, like a PN-counter's entries: each data center keeps its own and
 * the union of everyone's is the per-register max. Pure: hashes come in as arguments.
 */

/** Bits of the hash that pick a register. */
export const HLL_PRECISION = 12;
export const HLL_REGISTERS = 1 << HLL_PRECISION;
/** The largest rank: 32 bits of the second hash, all zero. */
export const HLL_MAX_RANK = 33;

/**
 * The register and rank of an item from two independent 32-bit hashes of it: the first picks the
 * register, the position of the lowest set bit of the second is the rank (1 for ...1, 2 for ...10).
 * Ranks over 44 bits of hash in all: far beyond the distinct visitors one page may have.
 */
export function registerOf(indexHash: number, rankHash: number): { index: number; rank: number } {
  const index = indexHash >>> (32 - HLL_PRECISION);
  const bits = rankHash >>> 0;
  const rank = bits === 0 ? HLL_MAX_RANK : 32 - Math.clz32(bits & -bits);
  return { index, rank };
}

/** The bias correction of the raw estimate for HLL_REGISTERS registers. */
const ALPHA = 0.7213 / (1 + 1.079 / HLL_REGISTERS);

/**
 * Estimated distinct items of the registers given as index -> rank (absent: 0). Small counts, where
 * empty registers remain, use linear counting, as the paper prescribes; no large-range correction
 * is needed with 44 bits of hash.
 */
export function estimateDistinct(ranks: ReadonlyMap<number, number>): number {
  let sum = HLL_REGISTERS - ranks.size;
  let zeros = HLL_REGISTERS - ranks.size;
  for (const rank of ranks.values()) {
    if (rank === 0) zeros++;
    sum += 2 ** -rank;
  }
  const raw = (ALPHA * HLL_REGISTERS * HLL_REGISTERS) / sum;
  if (raw <= 2.5 * HLL_REGISTERS && zeros > 0) return Math.round(HLL_REGISTERS * Math.log(HLL_REGISTERS / zeros));
  return Math.round(raw);
}
