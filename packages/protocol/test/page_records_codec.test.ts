import type { Entries } from "@livecount/crdt";
import { describe, expect, it } from "vitest";
import { decodeMessage, encodeAeEntries, encodeMessage, encodePageUpdates } from "../src/index.js";

const NUMBERS = [0, 1, 127, 128, 255, 256, 65_535, 65_536, 2 ** 32 - 1, 2 ** 32, Number.MAX_SAFE_INTEGER];

/** A page's record of `counters` counters over `dcs` data centers, its numbers picked by `seed`. */
function record(seed: number, counters: number, dcs: number): Record<string, Entries> {
  const out: Record<string, Entries> = {};
  for (let c = 0; c < counters; c++) {
    const entries: Record<string, { p: number; n: number }> = {};
    for (let d = 0; d < dcs; d++)
      entries[`dc-${d}`] = {
        p: NUMBERS[(seed + c + d) % NUMBERS.length]!,
        n: NUMBERS[(seed * 3 + d) % NUMBERS.length]!,
      };
    out[c === 0 ? "likes" : `counter-${c}`] = entries;
  }
  return out;
}

describe("internal - page records written by hand (ae_entries, updates)", () => {
  it("internal - ae_entries are msgpackr's bytes for the same message, with every flag, from 0 to 10,000 pages", () => {
    const head = { from: "dc1", to: "dc2", partition: 255 };
    const cases: Array<{
      pages: Array<[string, Record<string, Entries>]>;
      flags: object;
      bytes: Uint8Array;
    }> = [];
    for (const size of [0, 1, 15, 16, 300, 10_000]) {
      for (const flags of [
        {},
        { pull: [0, 1, 63, 200] },
        { done: true },
        { done: true, floor: 2 ** 40 },
        { pull: [7], senderLearning: true },
        { done: true, floor: 2 ** 40, senderLearning: true },
      ]) {
        const pages = Array.from({ length: size }, (_, i): [string, Record<string, Entries>] => [
          `page-${i}`,
          record(i, 1 + (i % 17), 1 + (i % 3)),
        ]);
        cases.push({ pages, flags, bytes: encodeAeEntries(head, pages, flags) });
      }
    }
    // Compared once all are written: none was overwritten by a later one.
    for (const { pages, flags, bytes } of cases) {
      const msg = { type: "ae_entries", ...head, pages: Object.fromEntries(pages), ...flags } as const;
      expect(Buffer.compare(Buffer.from(bytes), Buffer.from(encodeMessage(msg)))).toBe(0);
    }
    const last = cases.find((c) => c.pages.length === 300 && "floor" in c.flags)!;
    expect(decodeMessage(last.bytes)).toEqual({
      type: "ae_entries",
      ...head,
      pages: Object.fromEntries(last.pages),
      ...last.flags,
    });
  });

  it("internal - updates are msgpackr's bytes for the same message at every size", () => {
    const cases: Array<{ pages: Array<[string, Record<string, Entries>]>; ts: number; bytes: Uint8Array }> =
      [];
    for (const size of [0, 1, 15, 16, 300, 10_000]) {
      const pages = Array.from({ length: size }, (_, i): [string, Record<string, Entries>] => [
        `page-${i}`,
        record(i + size, 1 + (i % 4), 1 + (i % 3)),
      ]);
      const ts = NUMBERS[size % NUMBERS.length]!;
      cases.push({ pages, ts, bytes: encodePageUpdates(size % 300, pages, ts) });
    }
    for (const { pages, ts, bytes } of cases) {
      const msg = {
        type: "updates",
        partition: pages.length % 300,
        pages: Object.fromEntries(pages),
        ts,
      } as const;
      expect(Buffer.compare(Buffer.from(bytes), Buffer.from(encodeMessage(msg)))).toBe(0);
      expect(decodeMessage(bytes)).toEqual(msg);
    }
  });

  it("internal - the buffer is sized for the widest names and numbers: a message larger than a buffer is written whole", () => {
    // Three UTF-8 bytes a unit leave a string's bound two bytes to spare; 2^40 takes nine bytes.
    const wide = (n: number): string => "€".repeat(n);
    const entry = { p: 2 ** 40, n: 2 ** 40 };
    const shapes: Array<Array<[string, Record<string, Entries>]>> = [
      // Many pages of one counter in one DC.
      Array.from({ length: 600 }, (_, i) => [`${wide(5)}${i}`, { [wide(3)]: { [wide(2)]: entry } }]),
      // Pages of many counters, and counters of many DCs.
      Array.from({ length: 20 }, (_, i) => [
        `${wide(5)}${i}`,
        Object.fromEntries(
          Array.from({ length: 15 }, (_, c) => [
            `${wide(3)}${c}`,
            Object.fromEntries(Array.from({ length: 15 }, (_, d) => [`${wide(2)}${d}`, entry])),
          ]),
        ),
      ]),
      // Pages of many counters in one DC each.
      Array.from({ length: 40 }, (_, i) => [
        `${wide(5)}${i}`,
        Object.fromEntries(Array.from({ length: 15 }, (_, c) => [`${wide(3)}${c}`, { [wide(2)]: entry }])),
      ]),
      // One page whose id alone is larger than a buffer.
      [[wide(6000), { [wide(3)]: { [wide(2)]: entry } }]],
    ];
    const head = { from: wide(20), to: wide(20), partition: 2 ** 40 };
    const flags = { pull: [2 ** 40, 2 ** 40], done: true, floor: 2 ** 40, senderLearning: true };
    for (const pages of shapes) {
      const ae = { type: "ae_entries", ...head, pages: Object.fromEntries(pages), ...flags } as const;
      expect(
        Buffer.compare(Buffer.from(encodeAeEntries(head, pages, flags)), Buffer.from(encodeMessage(ae))),
      ).toBe(0);
      const updates = {
        type: "updates",
        partition: 2 ** 40,
        pages: Object.fromEntries(pages),
        ts: 2 ** 40,
      } as const;
      expect(
        Buffer.compare(
          Buffer.from(encodePageUpdates(2 ** 40, pages, 2 ** 40)),
          Buffer.from(encodeMessage(updates)),
        ),
      ).toBe(0);
    }
    // No page, every flag and a long pull, after ids larger than a buffer: the end of a transfer.
    const far = { from: wide(6000), to: wide(20), partition: 2 ** 40 };
    const ending = {
      pull: Array.from({ length: 2000 }, () => 2 ** 40),
      done: true,
      floor: 2 ** 40,
      senderLearning: true,
    };
    const ae = { type: "ae_entries", ...far, pages: {}, ...ending } as const;
    expect(
      Buffer.compare(Buffer.from(encodeAeEntries(far, [], ending)), Buffer.from(encodeMessage(ae))),
    ).toBe(0);
  });

  it("internal - a page or counter named __proto__ stays one, and the receiver decodes every page", () => {
    const pages: Array<[string, Record<string, Entries>]> = [
      [
        "__proto__",
        Object.defineProperty({}, "__proto__", { value: { dc1: { p: 2, n: 1 } }, enumerable: true }),
      ],
      ["home", { likes: { dc1: { p: 1, n: 0 }, dc2: { p: 3, n: 0 } } }],
    ];
    const decoded = decodeMessage(
      encodeAeEntries({ from: "dc1", to: "dc2", partition: 0 }, pages, { done: true }),
    );
    expect(decoded.type).toBe("ae_entries");
    if (decoded.type !== "ae_entries") return;
    expect(Object.keys(decoded.pages)).toEqual(["__proto__", "home"]);
    expect(Object.keys(decoded.pages["__proto__"]!)).toEqual(["__proto__"]);
    expect(decoded.pages["home"]).toEqual({ likes: { dc1: { p: 1, n: 0 }, dc2: { p: 3, n: 0 } } });
    expect(decoded.done).toBe(true);
  });
});
