import { HLL_REGISTERS } from "@livecount/crdt";
import { peakMinuteOf, uniqueRegisterOf } from "@livecount/protocol";
import type { PageRecord, Store } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { SeriesCache } from "../src/stats_read.js";

const DAY = 20_000;
const NOW = DAY * 86_400_000;

/** A store whose every page has `registers` registers of two days set, in two DCs, and a peak. */
function fullStore(reads: string[], registers = HLL_REGISTERS): Store {
  return {
    loadPrefixed: (page: string): Promise<PageRecord> => {
      reads.push(page);
      const record: Record<string, Record<string, { p: number; n: number }>> = {
        [peakMinuteOf(1)]: { dc1: { p: 7, n: 0 }, dc2: { p: 9, n: 0 } },
      };
      for (const day of [DAY - 1, DAY])
        for (let r = 0; r < registers; r++)
          record[uniqueRegisterOf(day, r)] = { dc1: { p: 1 + (r % 5), n: 0 }, dc2: { p: 2, n: 0 } };
      return Promise.resolve(record as PageRecord);
    },
  } as unknown as Store;
}

describe("counter - stats series cache", () => {
  test("counter - a page's stored registers are kept as a byte per register and day, with this DC's peaks", async () => {
    const cache = new SeriesCache();
    const summary = await cache.get(fullStore([]), "p", "dc1", NOW);
    expect([...summary.days.keys()]).toEqual([DAY - 1, DAY]);
    const today = summary.days.get(DAY)!;
    expect(today.byteLength).toBe(HLL_REGISTERS);
    expect([today[0], today[3], today[4]]).toEqual([2, 4, 5]);
    expect(summary.peaks.get(peakMinuteOf(1))).toBe(7);
  });

  test("counter - each page is read once a second, and a page that can serve no read or past 10,000 pages leaves", async () => {
    const reads: string[] = [];
    const store = fullStore(reads, 1);
    const cache = new SeriesCache();
    await cache.get(store, "a", "dc1", NOW);
    await cache.get(store, "a", "dc1", NOW + 999);
    expect(reads).toEqual(["a"]);
    // A second later nothing kept can serve a read: the next read leaves only itself.
    await cache.get(store, "b", "dc1", NOW + 1000);
    expect(cache.size).toBe(1);
    for (let i = 0; i < 10_001; i++) await cache.get(store, `page-${i}`, "dc1", NOW + 2000);
    expect(cache.size).toBe(10_000);
    reads.length = 0;
    await cache.get(store, "page-0", "dc1", NOW + 2000);
    await cache.get(store, "page-10000", "dc1", NOW + 2000);
    expect(reads).toEqual(["page-0"]);
  });
});
