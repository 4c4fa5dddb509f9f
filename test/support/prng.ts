/**
 * A small seeded PRNG for randomized tests (mulberry32). Each randomized test prints its seed; set
 * LIVECOUNT_TEST_SEED to replay a failing run. Without it, every run explores a new seed.
 */
export interface Random {
  /** Uniform in [0, 1). */
  next(): number;
  /** Uniform integer in [0, n). */
  int(n: number): number;
  /** True with probability `p`. */
  chance(p: number): boolean;
  pick<T>(items: readonly T[]): T;
  /** A shuffled copy. */
  shuffle<T>(items: readonly T[]): T[];
}

const UINT32 = 0x1_0000_0000;

export function mulberry32(seed: number): Random {
  let a = seed >>> 0;
  const next = (): number => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / UINT32;
  };
  const int = (n: number): number => Math.floor(next() * n);
  return {
    next,
    int,
    chance: (p) => next() < p,
    pick: (items) => items[int(items.length)]!,
    shuffle: (items) => {
      const out = [...items];
      for (let i = out.length - 1; i > 0; i--) {
        const j = int(i + 1);
        [out[i], out[j]] = [out[j]!, out[i]!];
      }
      return out;
    },
  };
}

/** The seed for this run: LIVECOUNT_TEST_SEED when set, else a fresh random one. Printed either way. */
export function testSeed(label: string): number {
  const fixed = process.env.LIVECOUNT_TEST_SEED;
  const seed = fixed !== undefined && fixed !== "" ? Number(fixed) >>> 0 : Math.floor(Math.random() * UINT32);
  console.log(`${label}: seed ${seed} (replay with LIVECOUNT_TEST_SEED=${seed})`);
  return seed;
}
