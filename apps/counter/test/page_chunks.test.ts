import type { Entry } from "@livecount/crdt";
import { encodeAeEntries, isSeriesCounter, uniqueRegisterOf, windowCounterOf } from "@livecount/protocol";
import type { PageRecord } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { MAX_ENTRIES_MESSAGE_BYTES, chunkPages, countsOf, hasCounts } from "../src/page_chunks.js";

const HEAD = { from: "dc1", to: "dc2", partition: 7 };

/** Every page of `chunks` put back together, entry by entry. */
function merged(
  chunks: ReadonlyArray<ReadonlyArray<readonly [string, PageRecord]>>,
): Record<string, PageRecord> {
  const out = new Map<string, Record<string, Record<string, Entry>>>();
  for (const chunk of chunks)
    for (const [page, part] of chunk) {
      const into = out.get(page) ?? {};
      for (const [counter, dcs] of Object.entries(part)) into[counter] = { ...into[counter], ...dcs };
      out.set(page, into);
    }
  return Object.fromEntries(out);
}

/** A busy page: likes with a day of window buckets, and every visitor register of two days, in two DCs. */
function busyPage(): PageRecord {
  const record: Record<string, Record<string, Entry>> = {
    likes: { dc1: { p: 90, n: 2 }, dc2: { p: 5, n: 0 } },
  };
  for (let minute = 0; minute < 1440; minute++)
    record[windowCounterOf("likes", 29_000_000 + minute)] = { dc1: { p: 3, n: 1 }, dc2: { p: 2, n: 0 } };
  for (const day of [20_000, 20_001])
    for (let r = 0; r < 4096; r++)
      record[uniqueRegisterOf(day, r)] = { dc1: { p: 7, n: 0 }, dc2: { p: 9, n: 0 } };
  return record;
}

function entries(record: PageRecord): number {
  let n = 0;
  for (const dcs of Object.values(record)) n += Object.keys(dcs).length;
  return n;
}

describe("counter - anti-entropy messages cut by what they carry", () => {
  test("counter - busy pages go in parts, every message within its bound as encoded, nothing lost", () => {
    const pages: Array<[string, PageRecord]> = [
      ["busy-1", busyPage()],
      ["small", { likes: { dc1: { p: 1, n: 0 } } }],
      ["busy-2", busyPage()],
      ["empty", {}],
    ];
    const chunks = [...chunkPages(pages)];
    expect(chunks.length).toBeGreaterThan(2);
    const whole = encodeAeEntries(HEAD, [["busy", busyPage()]]);
    const sizes = chunks.map(
      (chunk) => encodeAeEntries(HEAD, chunk, { done: true, floor: 2 ** 40 }).byteLength,
    );
    expect(Math.max(...sizes)).toBeLessThanOrEqual(MAX_ENTRIES_MESSAGE_BYTES);
    expect(merged(chunks)).toEqual(Object.fromEntries(pages));
    console.info(
      `anti-entropy messages: one busy page alone ${whole.byteLength} B; the largest of ${chunks.length} is ${Math.max(...sizes)} B`,
    );
    // A page's first part carries its counters before any time bucket.
    const first = chunks.flat().find(([page]) => page === "busy-1")![1];
    expect(Object.keys(first)[0]).toBe("likes");
    expect(entries(first)).toBeGreaterThan(0);
  });

  test("counter - pages of one entry under the longest ids stay within the bound: cut at 8,000 entries they took 1.2 MB", () => {
    const dc = "d".repeat(64);
    const pages: Array<[string, PageRecord]> = Array.from({ length: 8000 }, (_, i) => [
      `p${String(i).padStart(127, "0")}`,
      { ["c".repeat(63) + (i % 10)]: { [dc]: { p: 2 ** 50 + i, n: 2 ** 49 } } },
    ]);
    const chunks = [...chunkPages(pages)];
    const sizes = chunks.map(
      (chunk) =>
        encodeAeEntries({ from: dc, to: dc, partition: 65535 }, chunk, { done: true, floor: 2 ** 52 })
          .byteLength,
    );
    expect(Math.max(...sizes)).toBeLessThanOrEqual(MAX_ENTRIES_MESSAGE_BYTES);
    // Full messages: each carries most of what it may.
    expect(Math.min(...sizes.slice(0, -1))).toBeGreaterThan(MAX_ENTRIES_MESSAGE_BYTES / 2);
    expect(merged(chunks)).toEqual(Object.fromEntries(pages));
    // Pages without entries too (asked for, nothing held): their ids alone fill messages.
    const empty: Array<[string, PageRecord]> = Array.from({ length: 5000 }, (_, i) => [
      `e${String(i).padStart(127, "0")}`,
      {},
    ]);
    const withEmpty = [...chunkPages([...pages.slice(0, 3000), ...empty])];
    for (const chunk of withEmpty)
      expect(encodeAeEntries(HEAD, chunk).byteLength).toBeLessThanOrEqual(MAX_ENTRIES_MESSAGE_BYTES);
    expect(withEmpty.flat().length).toBe(8000);
    console.info(
      `anti-entropy messages of 8,000 one-entry pages: ${chunks.length}, the largest ${Math.max(...sizes)} B`,
    );
  });

  test("counter - small pages share a message up to the bound; a page that does not fit what is left is cut there", () => {
    const pages: Array<[string, PageRecord]> = Array.from({ length: 25 }, (_, i) => [
      `p${i}`,
      { likes: { dc1: { p: i + 1, n: 0 } }, shares: { dc2: { p: 1, n: 0 } } },
    ]);
    const maxBytes = 2048;
    const chunks = [...chunkPages(pages, maxBytes)];
    expect(chunks.length).toBeGreaterThan(1);
    for (const chunk of chunks) expect(encodeAeEntries(HEAD, chunk).byteLength).toBeLessThanOrEqual(maxBytes);
    expect(merged(chunks)).toEqual(Object.fromEntries(pages));
    expect(chunks.flat().filter(([, r]) => Object.keys(r).some(isSeriesCounter))).toEqual([]);
    // And no more entries than the entry bound, whatever their bytes.
    const byEntries = [...chunkPages(pages, MAX_ENTRIES_MESSAGE_BYTES, 10)];
    expect(byEntries.map((c) => c.reduce((n, [, r]) => n + entries(r), 0))).toEqual([10, 10, 10, 10, 10]);
  });

  test("counter - a page that fits goes as it was read, not rebuilt", () => {
    const record: PageRecord = {
      likes: { dc1: { p: 2, n: 0 } },
      [windowCounterOf("likes", 29_000_000)]: { dc1: { p: 2, n: 0 } },
    };
    const [chunk] = [...chunkPages([["p", record]], 4096)];
    expect(chunk![0]![1]).toBe(record);
  });
});

describe("counter - what anti-entropy brought, for this DC's gateways", () => {
  test("counter - time buckets are left out, and pages holding nothing else", () => {
    const counts = countsOf(
      new Map<string, PageRecord>([
        [
          "a",
          {
            likes: { dc1: { p: 3, n: 0 } },
            [windowCounterOf("likes", 29_000_000)]: { dc1: { p: 3, n: 0 } },
            [uniqueRegisterOf(20_000, 5)]: { dc2: { p: 4, n: 0 } },
          },
        ],
        ["b", { [windowCounterOf("likes", 29_000_001)]: { dc2: { p: 1, n: 0 } } }],
        ["c", JSON.parse('{"__proto__": {"dc1": {"p": 1, "n": 0}}}') as PageRecord],
      ]),
    );
    expect(counts.map(([page]) => page)).toEqual(["a", "c"]);
    expect(counts[0]![1]).toEqual({ likes: { dc1: { p: 3, n: 0 } } });
    // A counter named "__proto__" stays a counter.
    expect(Object.keys(counts[1]![1])).toEqual(["__proto__"]);
  });

  test("counter - a page without time buckets goes as it is; one with them is copied without them", () => {
    const plain: PageRecord = { likes: { dc1: { p: 1, n: 0 } } };
    const mixed = JSON.parse(
      `{"${windowCounterOf("likes", 29_000_000)}": {"dc1": {"p": 1, "n": 0}}, "__proto__": {"dc2": {"p": 2, "n": 0}}}`,
    ) as PageRecord;
    const counts = countsOf(
      new Map([
        ["plain", plain],
        ["mixed", mixed],
      ]),
    );
    expect(counts[0]![1]).toBe(plain);
    const kept = counts[1]![1];
    expect(Object.keys(kept)).toEqual(["__proto__"]);
    expect(Object.getPrototypeOf(kept)).toBe(Object.prototype);
    expect(kept["__proto__"]).toEqual({ dc2: { p: 2, n: 0 } });
    // The received record is left whole (its buckets go to the store).
    expect(Object.keys(mixed)).toHaveLength(2);
  });

  test("counter - what a page actor takes: anything but time buckets", () => {
    expect(hasCounts({ likes: { dc1: { p: 1, n: 0 } } })).toBe(true);
    expect(hasCounts({ [windowCounterOf("likes", 29_000_000)]: { dc1: { p: 1, n: 0 } } })).toBe(false);
    expect(hasCounts({ [uniqueRegisterOf(20_000, 5)]: { dc1: { p: 1, n: 0 } }, "@viewers": {} })).toBe(true);
    expect(hasCounts({})).toBe(false);
  });
});
