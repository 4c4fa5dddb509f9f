import { describe, expect, it } from "vitest";
import {
  InvalidEntryError,
  PNCounter,
  ZERO_ENTRY,
  entryAdvances,
  isEntry,
  mergeEntry,
  type Entries,
  type Entry,
  type ReplicaId,
} from "../src/index.js";
import { mulberry32, testSeed, type Random } from "../../../test/support/prng.js";

const MAX = Number.MAX_SAFE_INTEGER;

/** Malformed entries: negative, fractional, unsafe, non-numeric or missing halves, non-objects. */
const BAD_ENTRIES: readonly unknown[] = [
  null,
  undefined,
  1,
  "p",
  [],
  {},
  { p: 1 },
  { n: 1 },
  { p: -1, n: 0 },
  { p: 0, n: -1 },
  { p: 1.5, n: 0 },
  { p: 0, n: 0.5 },
  { p: MAX + 1, n: 0 },
  { p: 0, n: 2 ** 60 },
  { p: "1", n: 0 },
  { p: Number.NaN, n: 0 },
  { p: Number.POSITIVE_INFINITY, n: 0 },
  { p: 1n, n: 0 },
];

function randomEntries(rnd: Random, replicas: readonly ReplicaId[]): Record<ReplicaId, Entry> {
  const out: Record<ReplicaId, Entry> = {};
  for (const r of replicas) if (rnd.chance(0.7)) out[r] = { p: rnd.int(50), n: rnd.int(50) };
  return out;
}

function merged(...states: Entries[]): PNCounter {
  const c = new PNCounter();
  for (const s of states) c.mergeAll(s);
  return c;
}

/** Entries in a canonical order, so states compare by content only. */
function canonical(c: PNCounter): [ReplicaId, Entry][] {
  return Object.entries(c.entries()).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

describe("PNCounter", () => {
  it("crdt - starts at zero with no replicas", () => {
    const c = new PNCounter();
    expect(c.value()).toBe(0);
    expect(c.entry("dc1")).toBe(ZERO_ENTRY);
    expect([...c.replicas()]).toEqual([]);
    expect(c.entries()).toEqual({});
  });

  it("crdt - counts increments and decrements per replica; the value is sum(p) - sum(n)", () => {
    const c = new PNCounter();
    expect(c.increment("dc1")).toEqual({ p: 1, n: 0 });
    expect(c.increment("dc1", 4)).toEqual({ p: 5, n: 0 });
    expect(c.decrement("dc1", 2)).toEqual({ p: 5, n: 2 });
    expect(c.decrement("dc2")).toEqual({ p: 0, n: 1 });
    expect(c.add("dc2", 10)).toEqual({ p: 10, n: 1 });
    expect(c.add("dc2", -3)).toEqual({ p: 10, n: 4 });
    expect(c.value()).toBe(5 - 2 + 10 - 4);
    expect(c.entries()).toEqual({ dc1: { p: 5, n: 2 }, dc2: { p: 10, n: 4 } });
  });

  it("crdt - can go negative and counts only the replicas accepted by a filter", () => {
    const c = new PNCounter();
    c.decrement("dc1", 7);
    c.increment("dc2", 3);
    expect(c.value()).toBe(-4);
    expect(c.value((r) => r === "dc2")).toBe(3);
    expect(c.value(() => false)).toBe(0);
  });

  it("crdt - rejects amounts that are not non-negative safe integers", () => {
    const c = new PNCounter();
    c.increment("dc1", 3);
    for (const by of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, MAX + 1]) {
      expect(() => c.increment("dc1", by)).toThrow(InvalidEntryError);
      expect(() => c.decrement("dc1", by)).toThrow(InvalidEntryError);
    }
    expect(() => c.add("dc1", Number.NaN)).toThrow(InvalidEntryError);
    expect(c.entry("dc1")).toEqual({ p: 3, n: 0 });
  });

  it("crdt - refuses to overflow an entry past the safe integers, leaving it unchanged", () => {
    const c = PNCounter.from({ dc1: { p: MAX - 1, n: MAX } });
    expect(c.increment("dc1")).toEqual({ p: MAX, n: MAX });
    expect(() => c.increment("dc1")).toThrow(InvalidEntryError);
    expect(() => c.decrement("dc1")).toThrow(InvalidEntryError);
    expect(c.entry("dc1")).toEqual({ p: MAX, n: MAX });
    expect(isEntry(c.entry("dc1"))).toBe(true);
  });

  it("crdt - merges per entry by the max of p and of n", () => {
    const c = PNCounter.from({ dc1: { p: 5, n: 1 } });
    expect(c.merge("dc1", { p: 3, n: 4 })).toBe(true);
    expect(c.entry("dc1")).toEqual({ p: 5, n: 4 });
    expect(c.merge("dc1", { p: 5, n: 4 })).toBe(false);
    expect(c.merge("dc1", { p: 2, n: 2 })).toBe(false);
    expect(c.merge("dc2", { p: 1, n: 0 })).toBe(true);
    expect(c.value()).toBe(5 - 4 + 1);
  });

  it("crdt - ignores an all-zero entry from an unknown replica", () => {
    const c = new PNCounter();
    expect(c.merge("dc1", { p: 0, n: 0 })).toBe(false);
    expect([...c.replicas()]).toEqual([]);
  });

  it("crdt - stores a copy of merged entries, without extra fields", () => {
    const c = new PNCounter();
    const incoming = { p: 4, n: 1, note: "extra" };
    c.merge("dc1", incoming);
    const bigger = { p: 9, n: 2 };
    c.merge("dc1", bigger);
    incoming.p = 1000;
    bigger.p = 1000;
    expect(c.entry("dc1")).toEqual({ p: 9, n: 2 });
    expect(Object.keys(c.entries().dc1!)).toEqual(["p", "n"]);
  });

  it("crdt - rejects malformed entries in merge, mergeAll and from, and keeps its state", () => {
    const c = PNCounter.from({ dc1: { p: 2, n: 1 } });
    for (const bad of BAD_ENTRIES) {
      expect(isEntry(bad)).toBe(false);
      expect(() => c.merge("dc1", bad as Entry)).toThrow(InvalidEntryError);
      expect(() => c.mergeAll({ dc1: bad as Entry })).toThrow(InvalidEntryError);
      expect(() => PNCounter.from({ dc9: bad as Entry })).toThrow(InvalidEntryError);
    }
    expect(c.entries()).toEqual({ dc1: { p: 2, n: 1 } });
  });

  it("crdt - merge is idempotent, commutative and associative", () => {
    const rnd = mulberry32(7);
    const replicas = ["dc1", "dc2", "dc3", "dc4"];
    for (let t = 0; t < 300; t++) {
      const [a, b, c] = [
        randomEntries(rnd, replicas),
        randomEntries(rnd, replicas),
        randomEntries(rnd, replicas),
      ];
      const ab = merged(a, b);
      expect(ab.mergeAll(a) || ab.mergeAll(b)).toBe(false);
      expect(canonical(ab)).toEqual(canonical(merged(b, a)));
      const left = merged(merged(a, b).entries(), c);
      const right = merged(a, merged(b, c).entries());
      expect(canonical(left)).toEqual(canonical(right));
      expect(left.value()).toBe(right.value());
    }
  });

  it("crdt - keeps a replica named __proto__ as an entry everywhere", () => {
    const c = new PNCounter();
    c.increment("__proto__", 2);
    expect(Object.keys(c.entries())).toEqual(["__proto__"]);
    expect(PNCounter.from(c.entries()).value()).toBe(2);
  });

  it("crdt - counters share no state: each keeps its own replicas, in the order they came", () => {
    const a = new PNCounter();
    const b = new PNCounter();
    a.increment("dc2", 3);
    a.increment("dc1");
    a.decrement("dc2");
    b.increment("dc3", 7);
    expect([...a.replicas()]).toEqual(["dc2", "dc1"]);
    expect(a.entries()).toEqual({ dc2: { p: 3, n: 1 }, dc1: { p: 1, n: 0 } });
    expect([...b.replicas()]).toEqual(["dc3"]);
    expect(new PNCounter().entries()).toEqual({});
    expect(a.value((dc) => dc !== "dc1")).toBe(2);
    // An entry handed out earlier is a snapshot: a later change replaces it, never changes it.
    const before = a.entry("dc2");
    const entries = a.entries();
    a.increment("dc2", 4);
    expect(before).toEqual({ p: 3, n: 1 });
    expect(entries.dc2).toEqual({ p: 3, n: 1 });
    expect(a.entry("dc2")).toEqual({ p: 7, n: 1 });
  });
});

describe("entry helpers", () => {
  it("crdt - isEntry accepts two non-negative safe integers", () => {
    expect(isEntry({ p: 0, n: 0 })).toBe(true);
    expect(isEntry({ p: MAX, n: MAX })).toBe(true);
    expect(isEntry({ p: 1, n: 2, extra: true })).toBe(true);
  });

  it("crdt - mergeEntry is the per-field max and returns an input when it dominates", () => {
    const a = { p: 3, n: 1 };
    const b = { p: 2, n: 5 };
    expect(mergeEntry(a, b)).toEqual({ p: 3, n: 5 });
    expect(mergeEntry(a, { p: 1, n: 1 })).toBe(a);
    expect(mergeEntry({ p: 1, n: 0 }, a)).toBe(a);
    // A tie on one field still dominates on the other.
    expect(mergeEntry(a, { p: 3, n: 0 })).toBe(a);
    expect(mergeEntry({ p: 3, n: 0 }, a)).toBe(a);
    expect(mergeEntry({ p: 0, n: 1 }, a)).toBe(a);
  });

  it("crdt - an amount of zero is allowed and changes nothing", () => {
    const c = PNCounter.from({ dc1: { p: 2, n: 1 } });
    expect(c.increment("dc1", 0)).toEqual({ p: 2, n: 1 });
    expect(c.decrement("dc1", 0)).toEqual({ p: 2, n: 1 });
    expect(c.add("dc1", 0)).toEqual({ p: 2, n: 1 });
    expect(c.value()).toBe(1);
  });

  it("crdt - errors are InvalidEntryErrors that say what was wrong", () => {
    const c = PNCounter.from({ dc1: { p: MAX, n: 0 } });
    const errorOf = (f: () => unknown): Error => {
      try {
        f();
      } catch (err) {
        return err as Error;
      }
      throw new Error("expected a throw");
    };
    const negative = errorOf(() => c.increment("dc1", -2));
    expect(negative).toBeInstanceOf(InvalidEntryError);
    expect(negative.name).toBe("InvalidEntryError");
    expect(negative.message).toBe("amount must be a non-negative safe integer, got -2");
    expect(errorOf(() => c.increment("dc1", 1)).message).toBe(`entry would overflow: ${MAX} + 1`);
    expect(errorOf(() => c.merge("dc7", { p: -1, n: 0 })).message).toBe("malformed entry for dc7");
  });

  it("crdt - mergeAll says whether anything changed, whichever entry changed it", () => {
    const c = PNCounter.from({ dc1: { p: 2, n: 0 }, dc2: { p: 5, n: 0 } });
    expect(c.mergeAll({ dc1: { p: 3, n: 0 }, dc2: { p: 5, n: 0 } })).toBe(true);
    expect(c.mergeAll({ dc1: { p: 3, n: 0 }, dc2: { p: 5, n: 0 } })).toBe(false);
    expect(c.mergeAll({ dc1: { p: 1, n: 0 }, dc3: { p: 1, n: 0 } })).toBe(true);
    expect(c.mergeAll({})).toBe(false);
  });

  it("crdt - entryAdvances says whether an entry holds something unseen", () => {
    expect(entryAdvances(undefined, { p: 0, n: 0 })).toBe(false);
    expect(entryAdvances(undefined, { p: 0, n: 1 })).toBe(true);
    expect(entryAdvances({ p: 2, n: 2 }, { p: 2, n: 2 })).toBe(false);
    expect(entryAdvances({ p: 2, n: 2 }, { p: 1, n: 3 })).toBe(true);
    expect(entryAdvances({ p: 2, n: 2 }, { p: 3, n: 0 })).toBe(true);
  });
});

/** A state message in flight: one replica's own entry (an update) or its whole state (anti-entropy). */
interface Message {
  readonly to: number;
  readonly entries: Entries;
}

/**
 * Replicas each write only their own entry and publish it after every operation. The network
 * drops, duplicates, delays and reorders messages, and partitions the replicas into two sides for
 * a while. After the last operation the partition heals, whatever is still in flight arrives, and
 * every replica sends its whole state to every other one (anti-entropy).
 */
function simulate(seed: number): void {
  const rnd = mulberry32(seed);
  const replicaCount = 2 + rnd.int(4);
  const ids = Array.from({ length: replicaCount }, (_, i) => `dc${i}`);
  const replicas = ids.map(() => new PNCounter());
  /** What each replica really did: its own entry as only it knows it. */
  const truth = ids.map(() => ({ p: 0, n: 0 }));
  let trueSum = 0;
  let inFlight: Message[] = [];
  let side: boolean[] | undefined;
  const context = `seed ${seed}`;

  const connected = (a: number, b: number): boolean => side === undefined || side[a] === side[b];
  const send = (from: number, entries: Entries): void => {
    for (let to = 0; to < replicaCount; to++) {
      if (to === from || !connected(from, to) || rnd.chance(0.15)) continue;
      const copies = rnd.chance(0.2) ? 2 + rnd.int(2) : 1;
      for (let c = 0; c < copies; c++) inFlight.push({ to, entries });
    }
  };
  const deliver = (msg: Message): void => {
    const replica = replicas[msg.to]!;
    const before = replica.entries();
    replica.mergeAll(msg.entries);
    // Entries only grow, and never past what their writer did: nothing is ever counted twice.
    ids.forEach((id, i) => {
      const e = replica.entry(id);
      const was = before[id] ?? ZERO_ENTRY;
      if (e.p < was.p || e.n < was.n) expect.fail(`${context}: entry ${id} went back at ${msg.to}`);
      if (e.p > truth[i]!.p || e.n > truth[i]!.n)
        expect.fail(`${context}: entry ${id} over-counted at ${msg.to}`);
    });
  };
  const deliverSome = (): void => {
    // Reordering and delay: a random subset of what is in flight arrives, in random order.
    const arriving = inFlight.filter(() => rnd.chance(0.3));
    inFlight = inFlight.filter((m) => !arriving.includes(m));
    for (const msg of rnd.shuffle(arriving)) {
      if (side !== undefined && rnd.chance(0.5)) continue; // lost on a flaky link during the partition
      deliver(msg);
    }
  };

  const steps = 50 + rnd.int(150);
  for (let step = 0; step < steps; step++) {
    if (side === undefined && rnd.chance(0.05)) side = ids.map(() => rnd.chance(0.5));
    else if (side !== undefined && rnd.chance(0.1)) side = undefined;

    const writer = rnd.int(replicaCount);
    const by = 1 + rnd.int(5);
    const counter = replicas[writer]!;
    const id = ids[writer]!;
    const own = rnd.chance(0.6) ? counter.increment(id, by) : counter.decrement(id, by);
    trueSum += own.p - truth[writer]!.p - (own.n - truth[writer]!.n);
    truth[writer] = { p: own.p, n: own.n };
    // Updates carry the writer's own entry; now and then a replica gossips its whole state.
    send(writer, { [id]: own });
    if (rnd.chance(0.1)) {
      const gossip = rnd.int(replicaCount);
      send(gossip, replicas[gossip]!.entries());
    }
    deliverSome();
  }

  side = undefined;
  for (const msg of rnd.shuffle(inFlight)) deliver(msg);
  inFlight = [];
  for (const from of rnd.shuffle(ids.map((_, i) => i))) {
    for (let to = 0; to < replicaCount; to++)
      if (to !== from) deliver({ to, entries: replicas[from]!.entries() });
  }

  const expected = Object.fromEntries(
    ids.map((id, i) => [id, truth[i]!]).filter(([, e]) => isEntryNonZero(e as Entry)),
  );
  for (const replica of replicas) {
    expect(replica.entries(), context).toEqual(expected);
    expect(replica.value(), context).toBe(trueSum);
  }
}

function isEntryNonZero(e: Entry): boolean {
  return e.p > 0 || e.n > 0;
}

describe("PNCounter convergence", () => {
  it("crdt - replicas converge to the true sum through drops, duplicates, reordering and partitions", () => {
    const base = testSeed("pn-counter convergence");
    const seeds = 200;
    for (let i = 0; i < seeds; i++) simulate((base + i) >>> 0);
  });
});
