import { describe, expect, test } from "vitest";
import { bucketOf } from "../src/digest.js";
import { packer } from "../src/redis_connection.js";
import { packList, packMerge, packWrites } from "../src/redis_entry_writes.js";
import { entryField } from "../src/redis_records.js";
import type { EntryWrite, PageRecord } from "../src/store.js";

/** lcWrite's argument as msgpackr packs it: page, bucket, count, then field, p, n, indexed per entry. */
function packedByMsgpackr(writes: readonly EntryWrite[]): Buffer {
  const byPage = new Map<string, EntryWrite[]>();
  for (const w of writes) byPage.set(w.page, [...(byPage.get(w.page) ?? []), w]);
  const flat: Array<string | number | boolean> = [];
  for (const [page, list] of byPage) {
    flat.push(page, bucketOf(page), list.length);
    for (const w of list) flat.push(entryField(w.counter, w.dc), w.entry.p, w.entry.n, w.indexed === true);
  }
  return Buffer.from(packer.pack(flat));
}

describe("store - a flush's writes packed for lcWrite", () => {
  test("store - the bytes msgpackr packs, at every number and array-header boundary, each intact after thousands more", () => {
    const numbers = [0, 1, 127, 128, 255, 256, 65_535, 65_536, 2 ** 32 - 1, 2 ** 32, Number.MAX_SAFE_INTEGER];
    const names = ["likes", "@viewers", "c".repeat(31), "c".repeat(32), "c".repeat(300), "é", "😀".repeat(9)];
    const groups: Array<{ writes: EntryWrite[]; packed: ReturnType<typeof packWrites> }> = [];
    for (let g = 0; g < 2000; g++) {
      const writes: EntryWrite[] = [];
      // Up to 20,000 entries in one group (a flush's bound): the array's 16- and 32-bit headers too.
      const size = g === 0 ? 20_000 : g === 1 ? 5_000 : [1, 5, 15, 16, 40][g % 5]!;
      for (let i = 0; i < size; i++)
        writes.push({
          page: `page-${(g * 7 + i) % (3 + (g % 11))}`,
          counter: `${names[(g + i) % names.length]}`,
          dc: `dc${i % 3}`,
          entry: { p: numbers[(g + i) % numbers.length]!, n: numbers[(g * 3 + i) % numbers.length]! },
          ...(i % 4 === 0 ? { indexed: i % 8 === 0 } : {}),
        });
      groups.push({ writes, packed: packWrites(writes) });
    }
    // Compared once all are written: none was overwritten by a later one.
    const differ = groups.filter(
      ({ writes, packed }) => Buffer.compare(packed.buffer, packedByMsgpackr(writes)) !== 0,
    );
    expect(differ.length).toBe(0);
    const [first] = groups;
    expect(first!.packed.pages).toEqual([...new Set(first!.writes.map((w) => w.page))]);
    expect(Buffer.isBuffer(first!.packed.buffer)).toBe(true);
  });

  test("store - merged pages packed for lcMerge: the bytes msgpackr packs, each intact after thousands more", () => {
    const numbers = [0, 1, 127, 128, 65_536, 2 ** 32, Number.MAX_SAFE_INTEGER];
    const chunks: Array<{ chunk: string[]; pages: Map<string, PageRecord>; packed: Buffer }> = [];
    for (let g = 0; g < 1000; g++) {
      const pages = new Map<string, PageRecord>();
      for (let i = 0; i < 1 + (g % 100); i++) {
        const record: PageRecord = {};
        for (let c = 0; c < 1 + ((g + i) % 6); c++) {
          const byDc: Record<string, { p: number; n: number }> = {};
          for (let d = 0; d < 1 + (c % 3); d++)
            byDc[`dc${d}`] = {
              p: numbers[(g + c + d) % numbers.length]!,
              n: numbers[(i + d) % numbers.length]!,
            };
          record[c === 0 ? "likes" : `@w:likes:${c}é`] = byDc;
        }
        pages.set(`page-${g}-${i}`, record);
      }
      const chunk = [...pages.keys()];
      chunks.push({ chunk, pages, packed: packMerge(chunk, pages) });
    }
    const differ = chunks.filter(({ chunk, pages, packed }) => {
      const flat: Array<string | number> = [];
      for (const page of chunk) {
        const entries = Object.entries(pages.get(page)!).flatMap(([counter, byDc]) =>
          Object.entries(byDc).flatMap(([dc, e]) => [entryField(counter, dc), e.p, e.n]),
        );
        flat.push(page, bucketOf(page), entries.length / 3, ...entries);
      }
      return Buffer.compare(packed, Buffer.from(packer.pack(flat))) !== 0;
    });
    expect(differ.length).toBe(0);
  });

  test("store - increments' pages and ops packed for lcIncrement: the bytes msgpackr packs, each intact after thousands more", () => {
    // What increment() packs: strings (ids, fields, decimal deltas, payloads) and safe integers of
    // either sign (page indexes, startAt, further deltas), around every size boundary.
    const numbers = [0, 1, 31, 32, 127, 128, 255, 256, 65_535, 65_536, 2 ** 32, Number.MAX_SAFE_INTEGER];
    const signed = numbers.flatMap((v) => [v, -v]);
    const strings = ["", "likes", "-3", "p".repeat(31), "p".repeat(32), '{"v":1}'.repeat(40), "é"];
    const lists: Array<{ items: Array<string | number>; packed: Buffer }> = [];
    for (let g = 0; g < 2000; g++) {
      const size = g === 0 ? 70_000 : g % 40;
      const items = Array.from({ length: size }, (_, i) =>
        (g + i) % 3 === 0 ? signed[(g + i) % signed.length]! : strings[(g * 7 + i) % strings.length]!,
      );
      lists.push({ items, packed: packList(items) });
    }
    const differ = lists.filter(
      ({ items, packed }) => Buffer.compare(packed, Buffer.from(packer.pack(items))) !== 0,
    );
    expect(differ.length).toBe(0);
    expect(Buffer.isBuffer(lists[0]!.packed)).toBe(true);
  });
});
