import { describe, expect, it } from "vitest";
import {
  DEFAULT_PARTITIONS,
  DEFAULT_VNODES,
  HashRing,
  MAX_PARTITIONS,
  MAX_VNODES,
  RingError,
  murmur3,
  murmur3Bytes,
  partitionOf,
} from "../src/index.js";
import { mulberry32, testSeed, type Random } from "../../../test/support/prng.js";

const P = DEFAULT_PARTITIONS;

/**
 * Balance bounds asserted below, per node count: the busiest node owns at most `max` times the
 * mean, the idlest at least `min` times it. The measured worst cases over 2000 random node sets
 * (see HashRing's doc comment) are inside them: 1.32/0.69, 1.43/0.59, 1.72/0.35.
 */
const BALANCE_BOUNDS = [
  { nodes: 3, max: 1.4, min: 0.6 },
  { nodes: 5, max: 1.5, min: 0.5 },
  { nodes: 10, max: 1.8, min: 0.3 },
] as const;
/** Adding a node to N moves between these multiples of P / (N + 1) partitions (measured 0.39..1.63). */
const MOVE_ON_ADD_MIN = 0.25;
const MOVE_ON_ADD_MAX = 2;
/** Fixed seed for the statistical bounds, so they are checked on the same node sets every run. */
const BOUNDS_SEED = 20240601;
const NODE_SETS = 200;

function randomNodeId(rnd: Random): string {
  return `counter-${rnd.int(1e9).toString(36)}-${rnd.int(1e9).toString(36)}`;
}

function randomNodes(rnd: Random, n: number): string[] {
  const nodes = new Set<string>();
  while (nodes.size < n) nodes.add(randomNodeId(rnd));
  return [...nodes];
}

function named(n: number): string[] {
  return Array.from({ length: n }, (_, i) => `counter-${i}`);
}

function owners(ring: HashRing): (string | undefined)[] {
  return Array.from({ length: ring.partitionCount }, (_, p) => ring.ownerOf(p));
}

function loads(ring: HashRing): number[] {
  return ring.nodes.map((node) => ring.partitionsOf(node).length);
}

/** Every partition has exactly one owner, a member, and partitionsOf agrees with ownerOf. */
function expectWellFormed(ring: HashRing, context = ""): void {
  const problems: string[] = [];
  const seen = new Array<number>(ring.partitionCount).fill(0);
  for (const node of ring.nodes) {
    for (const p of ring.partitionsOf(node)) {
      seen[p]!++;
      if (ring.ownerOf(p) !== node)
        problems.push(`partition ${p} listed for ${node}, owned by ${ring.ownerOf(p)}`);
    }
  }
  const want = ring.size === 0 ? 0 : 1;
  seen.forEach((n, p) => {
    if (n !== want) problems.push(`partition ${p} listed ${n} times`);
    const owner = ring.ownerOf(p);
    if (ring.size > 0 && (owner === undefined || !ring.has(owner)))
      problems.push(`partition ${p} owned by ${owner}`);
  });
  expect(problems, context).toEqual([]);
}

describe("murmur3", () => {
  it("murmur3 - matches the reference MurmurHash3 x86_32 vectors", () => {
    const seed = 0x9747b28c;
    const vectors: [string, number, number][] = [
      ["", 0, 0],
      ["", 1, 0x514e28b7],
      ["", 0xffffffff, 0x81f16f39],
      ["\0\0\0\0", 0, 0x2362f9de],
      ["a", seed, 0x7fa09ea6],
      ["ab", seed, 0x74875592],
      ["abc", seed, 0xc84a62dd],
      ["abcd", seed, 0xf0478627],
      ["aaaa", seed, 0x5a97808a],
      ["Hello, world!", seed, 0x24884cba],
      ["ππππππππ", seed, 0xd58063c1],
      ["a".repeat(256), seed, 0x37405bdc],
      ["The quick brown fox jumps over the lazy dog", seed, 0x2fa826cd],
    ];
    for (const [input, s, want] of vectors) expect(murmur3(input, s), JSON.stringify(input)).toBe(want);
  });

  it("murmur3 - hashes the UTF-8 bytes of a string, also past the reused buffer size", () => {
    for (const s of ["café", "日本語のページ", "😀 emoji", "x".repeat(5000), "é".repeat(3000)]) {
      const bytes = new TextEncoder().encode(s);
      expect(murmur3(s)).toBe(murmur3Bytes(bytes));
    }
  });
});

describe("partitionOf", () => {
  it("partitionOf - keeps the golden partitions of known pages (a change here moves every page)", () => {
    expect(partitionOf("home", P)).toBe(59);
    expect(partitionOf("article-42", P)).toBe(134);
    expect(partitionOf("/blog/2024/hello-world", P)).toBe(224);
    expect(partitionOf("a", P)).toBe(178);
    expect(partitionOf("~", P)).toBe(62);
    expect(partitionOf("https://example.com/news?id=7", P)).toBe(50);
  });

  it("partitionOf - stays within the partition count for any count", () => {
    for (const partitions of [1, 2, 7, 256, 1000, 65_536]) {
      for (let i = 0; i < 500; i++) {
        const p = partitionOf(`page-${i}`, partitions);
        expect(Number.isInteger(p) && p >= 0 && p < partitions).toBe(true);
      }
    }
  });

  it("partitionOf - spreads similar page ids evenly over the partitions", () => {
    const perPartition = 200;
    const counts = new Array<number>(P).fill(0);
    for (let i = 0; i < P * perPartition; i++) counts[partitionOf(`article-${i}`, P)]!++;
    // Chi-square with P - 1 = 255 degrees of freedom: mean 255, standard deviation ~22.6.
    const chiSquare = counts.reduce((sum, c) => sum + (c - perPartition) ** 2 / perPartition, 0);
    expect(chiSquare).toBeLessThan(255 + 5 * 22.6);
    expect(Math.min(...counts)).toBeGreaterThan(perPartition * 0.6);
    expect(Math.max(...counts)).toBeLessThan(perPartition * 1.4);
  });
});

describe("HashRing", () => {
  it("ring - has no owners when empty", () => {
    const ring = new HashRing();
    expect(ring.size).toBe(0);
    expect(ring.nodes).toEqual([]);
    expect(ring.ownerOf(0)).toBeUndefined();
    expect(ring.ownerOfPage("home")).toBeUndefined();
    expect(ring.partitionsOf("counter-0")).toEqual([]);
    expectWellFormed(ring);
  });

  it("ring - gives every partition to a single node", () => {
    const ring = new HashRing(["solo"]);
    expect(ring.partitionsOf("solo")).toEqual(Array.from({ length: P }, (_, p) => p));
    expect(ring.ownerOfPage("home")).toBe("solo");
  });

  it("ring - uses the defaults and exposes them", () => {
    const ring = new HashRing(["a"]);
    expect(ring.partitionCount).toBe(DEFAULT_PARTITIONS);
    expect(ring.vnodes).toBe(DEFAULT_VNODES);
  });

  it("ring - depends only on the set of nodes, not their order or duplicates", () => {
    const rnd = mulberry32(BOUNDS_SEED);
    for (let t = 0; t < 20; t++) {
      const nodes = randomNodes(rnd, 1 + rnd.int(8));
      const a = new HashRing(nodes);
      const b = new HashRing([...rnd.shuffle(nodes), ...nodes.slice(0, 2)]);
      expect(b.nodes).toEqual([...nodes].sort());
      expect(a.equals(b)).toBe(true);
      expect(owners(b)).toEqual(owners(a));
    }
  });

  it("ring - routes a page to the owner of its partition", () => {
    const ring = new HashRing(named(5));
    for (const page of ["home", "article-42", "~"]) {
      expect(ring.partitionOf(page)).toBe(partitionOf(page, P));
      expect(ring.ownerOfPage(page)).toBe(ring.ownerOf(partitionOf(page, P)));
    }
  });

  it("ring - keeps its golden assignment for known node ids", () => {
    const ring = new HashRing(named(3));
    expect([0, 1, 2, 3, 100, 255].map((p) => ring.ownerOf(p))).toEqual([
      "counter-0",
      "counter-1",
      "counter-0",
      "counter-1",
      "counter-2",
      "counter-2",
    ]);
    expect(loads(ring)).toEqual([77, 88, 91]);
  });

  it("ring - rejects bad parameters, node ids and partitions", () => {
    expect(() => new HashRing([], { partitions: 0 })).toThrow(RingError);
    expect(() => new HashRing([], { partitions: 1.5 })).toThrow(RingError);
    expect(() => new HashRing([], { vnodes: 0 })).toThrow(RingError);
    expect(() => new HashRing([""])).toThrow(RingError);
    const ring = new HashRing(["a"], { partitions: 8 });
    for (const bad of [-1, 8, 0.5, Number.NaN]) expect(() => ring.ownerOf(bad)).toThrow(RingError);
    expect(() => ring.changedPartitions(new HashRing(["a"]))).toThrow(RingError);
  });

  it("ring - says which parameter or id is wrong, with the allowed range", () => {
    const messageOf = (f: () => unknown): string => {
      try {
        f();
      } catch (err) {
        expect(err).toBeInstanceOf(RingError);
        expect((err as Error).name).toBe("RingError");
        return (err as Error).message;
      }
      throw new Error("expected a RingError");
    };
    expect(messageOf(() => new HashRing([], { vnodes: 0 }))).toBe(
      "vnodes must be an integer in 1..4096, got 0",
    );
    expect(messageOf(() => new HashRing([], { partitions: 65_537 }))).toBe(
      "partitions must be an integer in 1..65536, got 65537",
    );
    expect(messageOf(() => new HashRing([""]))).toBe("node ids must be non-empty strings");
    expect(messageOf(() => new HashRing(["a"], { partitions: 8 }).ownerOf(8))).toBe(
      "partition must be an integer in 0..7, got 8",
    );
    expect(
      messageOf(() => new HashRing(["a"], { partitions: 8 }).changedPartitions(new HashRing(["a"]))),
    ).toBe("partition counts differ: 8 vs 256");
  });

  it("ring - accepts vnodes and partitions from 1 to their maximum, and nothing past it", () => {
    const smallest = new HashRing(["a"], { vnodes: 1, partitions: 1 });
    expect(smallest.ownerOf(0)).toBe("a");
    expect(new HashRing(["a"], { vnodes: MAX_VNODES, partitions: MAX_PARTITIONS }).partitionCount).toBe(
      MAX_PARTITIONS,
    );
    expect(() => new HashRing([], { vnodes: MAX_VNODES + 1 })).toThrow(RingError);
    expect(() => new HashRing([], { partitions: MAX_PARTITIONS + 1 })).toThrow(RingError);
  });

  it("ring - rejects node ids that are not strings", () => {
    expect(() => new HashRing([42 as unknown as string])).toThrow("node ids must be non-empty strings");
  });

  it("ring - a point exactly on a partition's position owns that partition", () => {
    // node-35699's second point is at 13443 * 2^16: exactly where partition 13443 of 65536 sits.
    expect(murmur3("node-35699#1")).toBe(13_443 * 65_536);
    const ring = new HashRing(["node-35699", "node-b"], { vnodes: 2, partitions: 65_536 });
    expect(ring.ownerOf(13_443)).toBe("node-35699");
    expect(ring.ownerOf(13_444)).toBe("node-b");
  });

  it("ring - points on the same position go to the smaller node id", () => {
    // A murmur3 collision: both nodes' only point is at the same position.
    expect(murmur3("n16724#0")).toBe(murmur3("n100940#0"));
    for (const nodes of [
      ["n16724", "n100940"],
      ["n100940", "n16724"],
    ]) {
      const ring = new HashRing(nodes, { vnodes: 1, partitions: 4 });
      expect(owners(ring)).toEqual(["n100940", "n100940", "n100940", "n100940"]);
    }
  });

  it("ring - a ring grown or shrunk keeps its vnodes and partition count", () => {
    const ring = new HashRing(["a", "b"], { vnodes: 8, partitions: 32 });
    for (const other of [ring.withNode("c"), ring.withoutNode("a")]) {
      expect([other.vnodes, other.partitionCount]).toEqual([8, 32]);
    }
  });

  it("ring - is immutable: withNode and withoutNode return new rings", () => {
    const ring = new HashRing(["a", "b"]);
    const before = owners(ring);
    const added = ring.withNode("c");
    const removed = ring.withoutNode("a");
    expect(owners(ring)).toEqual(before);
    expect(added.nodes).toEqual(["a", "b", "c"]);
    expect(removed.nodes).toEqual(["b"]);
    expect(ring.withNode("a")).toBe(ring);
    expect(ring.withoutNode("zzz")).toBe(ring);
    expect(Object.isFrozen(ring.nodes)).toBe(true);
    ring.partitionsOf("a").push(9999);
    expect(ring.partitionsOf("a")).not.toContain(9999);
  });

  it("ring - compares equal only with the same nodes and parameters", () => {
    const ring = new HashRing(["a", "b"]);
    expect(ring.equals(new HashRing(["b", "a"]))).toBe(true);
    expect(ring.equals(new HashRing(["a"]))).toBe(false);
    expect(ring.equals(new HashRing(["a", "c"]))).toBe(false);
    expect(ring.equals(new HashRing(["a", "b"], { vnodes: 8 }))).toBe(false);
    expect(ring.equals(new HashRing(["a", "b"], { partitions: 64 }))).toBe(false);
  });

  it("ring - balances 256 partitions within the documented bounds", () => {
    const rnd = mulberry32(BOUNDS_SEED);
    for (const { nodes: n, max, min } of BALANCE_BOUNDS) {
      const mean = P / n;
      const sets = [named(n), ...Array.from({ length: NODE_SETS }, () => randomNodes(rnd, n))];
      for (const nodes of sets) {
        const counts = loads(new HashRing(nodes));
        expect(counts.reduce((a, b) => a + b, 0)).toBe(P);
        expect(Math.max(...counts), `${nodes.join(",")}: ${counts.join(",")}`).toBeLessThanOrEqual(
          max * mean,
        );
        expect(Math.min(...counts), `${nodes.join(",")}: ${counts.join(",")}`).toBeGreaterThanOrEqual(
          min * mean,
        );
      }
    }
  });

  it("ring - moves partitions only to an added node, about P / (N + 1) of them", () => {
    const rnd = mulberry32(BOUNDS_SEED);
    for (const n of [1, 3, 5, 10]) {
      const fair = P / (n + 1);
      let total = 0;
      for (let t = 0; t < NODE_SETS; t++) {
        const ring = new HashRing(randomNodes(rnd, n));
        const joiner = randomNodeId(rnd);
        const grown = ring.withNode(joiner);
        const moved = ring.changedPartitions(grown);
        expect(moved).toEqual(grown.partitionsOf(joiner));
        expect(moved.length).toBeGreaterThanOrEqual(MOVE_ON_ADD_MIN * fair);
        expect(moved.length).toBeLessThanOrEqual(MOVE_ON_ADD_MAX * fair);
        total += moved.length;
      }
      const average = total / NODE_SETS;
      expect(average).toBeGreaterThan(0.85 * fair);
      expect(average).toBeLessThan(1.15 * fair);
    }
  });

  it("ring - moves only the partitions of a removed node, spread over the others", () => {
    const rnd = mulberry32(BOUNDS_SEED);
    for (const n of [2, 3, 5, 10]) {
      for (let t = 0; t < NODE_SETS / 4; t++) {
        const ring = new HashRing(randomNodes(rnd, n));
        const leaver = rnd.pick(ring.nodes);
        const shrunk = ring.withoutNode(leaver);
        expect(ring.changedPartitions(shrunk)).toEqual(ring.partitionsOf(leaver));
        const heirs = new Set(ring.partitionsOf(leaver).map((p) => shrunk.ownerOf(p)));
        expect(heirs.has(leaver)).toBe(false);
        if (n >= 3 && ring.partitionsOf(leaver).length >= 10) expect(heirs.size).toBeGreaterThan(1);
      }
    }
  });

  it("ring - keeps every partition owned by exactly one live node through random membership changes", () => {
    const seed = testSeed("ring membership");
    const rnd = mulberry32(seed);
    const pool = randomNodes(rnd, 16);
    let ring = new HashRing(pool.slice(0, 3));
    for (let step = 0; step < 300; step++) {
      const member = rnd.pick(pool);
      const next = ring.has(member) ? ring.withoutNode(member) : ring.withNode(member);
      const moved = ring.changedPartitions(next);
      // Only the node that joined gains partitions; only the node that left loses any.
      const wrong = moved.filter(
        (p) => (next.size > ring.size ? next.ownerOf(p) : ring.ownerOf(p)) !== member,
      );
      expect(wrong, `seed ${seed} step ${step}`).toEqual([]);
      expectWellFormed(next, `seed ${seed} step ${step}`);
      // History independence: the same membership built from scratch, in any order, is the same ring.
      expect(owners(new HashRing(rnd.shuffle(next.nodes)))).toEqual(owners(next));
      ring = next;
    }
  });

  it("ring - works with other partition and vnode counts", () => {
    const ring = new HashRing(named(4), { partitions: 7, vnodes: 3 });
    expectWellFormed(ring);
    expect(ring.partitionOf("home")).toBe(partitionOf("home", 7));
    const big = new HashRing(named(4), { partitions: 4096, vnodes: 256 });
    expectWellFormed(big);
    for (const count of loads(big)) expect(count).toBeGreaterThan(4096 / 4 / 2);
  });
});
