import { HLL_REGISTERS, estimateDistinct, registerOf } from "@livecount/crdt";
import { VIEWER_KEY_MAX_LENGTH, dayOf, uniqueRegisterParts } from "@livecount/protocol";
import type { EntryWrite } from "@livecount/store";
import { createHash } from "node:crypto";
import siphash24 from "siphash24";
import { describe, expect, test } from "vitest";
import { mulberry32 } from "../../../test/support/prng.js";
import { PageSeries } from "../src/page_series.js";
import { RANK_BITS, RANK_MASK, VisitorHash } from "../src/visitor_hash.js";

/** The register and rank of an id under `hash`, from the one number `register` packs them in. */
function registerIn(hash: VisitorHash, id: string): { index: number; rank: number } {
  const packed = hash.register(id);
  return { index: packed >>> RANK_BITS, rank: packed & RANK_MASK };
}

/** The registers of `ids` as one owner raises them: per register, the largest rank. */
function registersOf(ids: Iterable<string>, into = new Map<number, number>()): Map<number, number> {
  for (const id of ids) {
    const { index, rank } = registerIn(HASH, id);
    into.set(index, Math.max(into.get(index) ?? 0, rank));
  }
  return into;
}

const KEY = "unique-visitors-test-key";
const HASH = new VisitorHash(KEY);

const ids = (prefix: string, n: number, from = 0): string[] =>
  Array.from({ length: n }, (_, i) => `v:${prefix}-${from + i}`);

/** Per-register max: how registers of several data centers (or days) merge. */
function union(...all: ReadonlyArray<Map<number, number>>): Map<number, number> {
  const out = new Map<number, number>();
  for (const ranks of all) for (const [i, r] of ranks) out.set(i, Math.max(out.get(i) ?? 0, r));
  return out;
}

describe("counter - unique visitors (HyperLogLog)", () => {
  test("counter - 10,000 distinct ids are estimated within the standard error: RMS <= 2% over 20 sets, each within 3 sigma", () => {
    const sigma = 1.04 / Math.sqrt(HLL_REGISTERS);
    const errors: number[] = [];
    for (let set = 0; set < 20; set++) {
      const estimate = estimateDistinct(registersOf(ids(`set${set}`, 10_000)));
      const error = (estimate - 10_000) / 10_000;
      expect(Math.abs(error), `set ${set}: ${estimate}`).toBeLessThanOrEqual(3 * sigma);
      errors.push(error);
    }
    const rms = Math.sqrt(errors.reduce((a, e) => a + e * e, 0) / errors.length);
    const worst = Math.max(...errors.map(Math.abs));
    console.info(
      `unique visitors, 20 sets of 10,000 ids: RMS error ${(rms * 100).toFixed(2)}%, worst ${(worst * 100).toFixed(2)}%`,
    );
    expect(rms).toBeLessThanOrEqual(0.02);
  });

  test("counter - small counts are close to exact, and a repeated id counts once", () => {
    for (const n of [0, 1, 10, 100, 1000]) {
      const estimate = estimateDistinct(registersOf([...ids("small", n), ...ids("small", n)]));
      expect(Math.abs(estimate - n), `${n}: ${estimate}`).toBeLessThanOrEqual(Math.max(1, n * 0.02));
    }
  });

  test("counter - registers of two DCs merged by max count the union: ids seen in both count once", () => {
    // 6,000 ids in dc1, 6,000 in dc2, 2,000 of them the same: 10,000 distinct.
    const dc1 = registersOf(ids("both", 6000));
    const dc2 = registersOf(ids("both", 6000, 4000));
    const estimate = estimateDistinct(union(dc1, dc2));
    expect(Math.abs(estimate - 10_000) / 10_000).toBeLessThanOrEqual(3 * (1.04 / Math.sqrt(HLL_REGISTERS)));
    // Merging is idempotent and commutative, like PN entries.
    expect(union(dc1, dc2)).toEqual(union(dc2, dc1, dc1));
  });

  test("counter - the register of an id depends on the key: ids picked for one key land anywhere under another", () => {
    const picked = ids("pick", 2000);
    const other = new VisitorHash(`${KEY}-other`);
    const one = picked.map((id) => registerIn(HASH, id).index);
    const two = picked.map((id) => registerIn(other, id).index);
    const same = one.filter((index, i) => index === two[i]).length;
    // By chance about 2000 / 4096 of them.
    expect(same).toBeLessThan(20);
  });

  test("counter - the visitor hash is SipHash-2-4 under the first 16 bytes of SHA-256 of the key", () => {
    // The reference vector of the SipHash paper: key 00..0f, message 00..0e.
    const message = Uint8Array.from({ length: 15 }, (_, i) => i);
    const key = Uint8Array.from({ length: 16 }, (_, i) => i);
    expect(Buffer.from(siphash24(message, key)).toString("hex")).toBe("e545be4961ca29a1");
    // The register of an id: the first 32 bits (little-endian) pick it, the lowest set bit of the next 32 ranks it.
    const sipKey = createHash("sha256").update(KEY).digest().subarray(0, 16);
    const out = Buffer.from(siphash24(Buffer.from("v:someone"), sipKey));
    expect(registerIn(HASH, "v:someone")).toEqual(registerOf(out.readUInt32LE(0), out.readUInt32LE(4)));
  });

  test("counter - ids of every length up to a viewer key's and past it, ASCII or not, hash as the package hashes their UTF-8", () => {
    const sipKey = createHash("sha256").update(KEY).digest().subarray(0, 16);
    const expected = (id: string): { index: number; rank: number } => {
      const out = Buffer.from(siphash24(Buffer.from(id), sipKey));
      return registerOf(out.readUInt32LE(0), out.readUInt32LE(4));
    };
    const differ: string[] = [];
    const rnd = mulberry32(7);
    for (let length = 0; length <= VIEWER_KEY_MAX_LENGTH + 9; length++) {
      for (let k = 0; k < 20; k++) {
        let id = Array.from({ length }, () => String.fromCharCode(0x21 + rnd.int(94))).join("");
        // Now and then a character past ASCII, at a random place (hashed as its UTF-8 bytes).
        if (length > 0 && k % 5 === 4) {
          const at = rnd.int(length);
          id = `${id.slice(0, at)}é${id.slice(at + 1)}`;
        }
        // Shorter ids after longer ones: nothing left of an earlier id counts.
        for (const each of [id, id.slice(0, length >> 1)])
          if (
            registerIn(HASH, each).index !== expected(each).index ||
            registerIn(HASH, each).rank !== expected(each).rank
          )
            differ.push(each);
      }
    }
    expect(differ).toEqual([]);
  });

  test("counter - an id longer than any viewer key is hashed whole, like a short one", () => {
    const long = `v:${"x".repeat(VIEWER_KEY_MAX_LENGTH)}`;
    const sipKey = createHash("sha256").update(KEY).digest().subarray(0, 16);
    const out = Buffer.from(siphash24(Buffer.from(long), sipKey));
    expect(registerIn(HASH, long)).toEqual(registerOf(out.readUInt32LE(0), out.readUInt32LE(4)));
    // The scratch buffer is not left holding the long id: the next short one hashes as before.
    expect(HASH.register("v:someone")).toEqual(new VisitorHash(KEY).register("v:someone"));
  });
});

describe("counter - a page's registers on its owner (PageSeries)", () => {
  const DAY_MS = 86_400_000;
  const NOW = 20_000 * DAY_MS + 5_000;
  const nonepresent = { viewers: (): string[] => [] };

  /** What one flush writes of today's registers (at most `registers` of them): register index -> rank. */
  function flushed(series: PageSeries, registers = Infinity): Map<number, number> {
    const writes: EntryWrite[] = [];
    series.take(writes, registers);
    const out = new Map<number, number>();
    for (const w of writes) {
      const parts = uniqueRegisterParts(w.counter);
      if (parts === undefined) continue;
      expect(parts.day).toBe(dayOf(NOW));
      expect(w.entry.n).toBe(0);
      out.set(parts.register, w.entry.p);
    }
    return out;
  }

  test("counter - sparse up to 256 registers, an array of all past that: each flush writes exactly the registers raised since, at their rank", () => {
    const series = new PageSeries("page", "dc1", HASH);
    const seen = new Map<number, number>();
    // Flushes of growing batches take the ranks from a handful of registers past the sparse limit
    // into the dense array; each batch repeats ids already seen, which raise nothing.
    let from = 0;
    for (const batch of [1, 7, 60, 150, 300, 1500]) {
      const batchIds = [...ids("many", batch, from), ...ids("many", Math.min(batch, from), 0)];
      from += batch;
      const before = new Map(seen);
      let raisedAny = false;
      for (const id of batchIds) raisedAny = series.visitor(id, nonepresent, NOW) || raisedAny;
      registersOf(batchIds, seen);
      const expected = new Map([...seen].filter(([index, rank]) => (before.get(index) ?? 0) < rank));
      expect(raisedAny).toBe(expected.size > 0);
      // What a flush bounds: exactly the registers it will write.
      expect(series.pendingCount).toBe(expected.size);
      expect(flushed(series)).toEqual(expected);
      expect(series.pendingCount).toBe(0);
    }
    expect(seen.size).toBeGreaterThan(256);
    // Everyone again: nothing rises, nothing to write.
    for (const id of ids("many", from)) expect(series.visitor(id, nonepresent, NOW)).toBe(false);
    expect(flushed(series).size).toBe(0);
  });

  test("counter - a flush with room for some registers writes those; the rest wait, raised further meanwhile, for the next", () => {
    const series = new PageSeries("page", "dc1", HASH);
    const first = ids("part", 50);
    for (const id of first) series.visitor(id, nonepresent, NOW);
    const all = registersOf(first);
    expect(series.registersWaiting).toBe(all.size);
    const part = flushed(series, 20);
    expect(part.size).toBe(20);
    expect(series.registersWaiting).toBe(all.size - 20);
    expect(series.pendingCount).toBe(all.size - 20);
    // More visitors before the next flush: registers already written may rise again, waiting ones
    // rise in place (still one write each).
    const more = ids("part", 2_000, 50);
    for (const id of more) series.visitor(id, nonepresent, NOW);
    const now = registersOf(more, new Map(all));
    const rest = flushed(series, 0);
    expect(rest.size).toBe(0);
    const written = new Map([...part, ...flushed(series)]);
    // Every register that rose past what was written is written, at its rank now.
    for (const [index, rank] of now) expect(written.get(index)).toBe(rank);
    expect(series.registersWaiting).toBe(0);
  });

  test("counter - a register raised twice before a flush is written once, at its higher rank", () => {
    const series = new PageSeries("page", "dc1", HASH);
    // Ids of one register with different ranks, the lower first.
    const byIndex = new Map<number, Array<{ id: string; rank: number }>>();
    for (const id of ids("pair", 20_000)) {
      const { index, rank } = registerIn(HASH, id);
      byIndex.set(index, [...(byIndex.get(index) ?? []), { id, rank }]);
    }
    const [index, candidates] = [...byIndex].find(([, c]) => new Set(c.map((x) => x.rank)).size > 1)!;
    const sorted = [...candidates].sort((a, b) => a.rank - b.rank);
    const low = sorted[0]!;
    const high = sorted[sorted.length - 1]!;
    expect(series.visitor(low.id, nonepresent, NOW)).toBe(true);
    expect(series.visitor(high.id, nonepresent, NOW)).toBe(true);
    expect(series.pendingCount).toBe(1);
    expect(flushed(series)).toEqual(new Map([[index, high.rank]]));
    // Named and flushed, it is no longer pending, and a lower rank of it raises nothing.
    expect(series.pendingCount).toBe(0);
    expect(series.visitor(low.id, nonepresent, NOW)).toBe(false);
  });
});
