/**
 * `GET /v1/pages/{page}/stats`: a page's state (as a snapshot), the most viewers this DC showed in
 * the last hour and day (its peak entries, page_series.ts), and the distinct visitors of the
 * current and previous UTC day over every DC (the per-register max of every DC's HyperLogLog
 * registers of both days).
 */
import { HLL_MAX_RANK, HLL_REGISTERS, estimateDistinct } from "@livecount/crdt";
import {
  PEAK_HOUR_PREFIX,
  PEAK_MINUTE_PREFIX,
  ProtocolError,
  UNIQUE_PREFIX,
  dayOf,
  peakHourOf,
  peakMinuteOf,
  peakSpans,
  uniqueRegisterParts,
  type NodeReply,
  type StatsRequest,
} from "@livecount/protocol";
import { StoreError, type PageRecord, type Store } from "@livecount/store";
import type { ActorRegistry } from "./actor_registry.js";

/** How long a page's registers and peaks read from the store serve further stats reads. */
const SERIES_CACHE_MS = 1000;
/**
 * Pages whose registers and peaks are kept at once: past it the oldest go. Each is kept as its
 * summary (a byte per register of each day, 4 KiB a day, and this DC's peaks), not as the record
 * read (up to 4,096 entries a day, hundreds of KB once a page's registers are all set): 10,000
 * pages hold at most some 100 MB, whatever the pages hold.
 */
const SERIES_CACHE_PAGES = 10_000;

/** What a stats read needs of a page's stored time buckets. */
interface SeriesSummary {
  /** The highest rank per register over every DC, per UTC day. */
  readonly days: ReadonlyMap<number, Uint8Array>;
  /** This DC's peak entries, by name. */
  readonly peaks: ReadonlyMap<string, number>;
}

function summaryOf(record: PageRecord, dc: string): SeriesSummary {
  const days = new Map<number, Uint8Array>();
  const peaks = new Map<string, number>();
  for (const [name, entries] of Object.entries(record)) {
    const parts = uniqueRegisterParts(name);
    if (parts === undefined) {
      if (Object.hasOwn(entries, dc)) peaks.set(name, entries[dc]!.p);
      continue;
    }
    let ranks = days.get(parts.day);
    if (ranks === undefined) days.set(parts.day, (ranks = new Uint8Array(HLL_REGISTERS)));
    for (const e of Object.values(entries))
      ranks[parts.register] = Math.max(ranks[parts.register]!, Math.min(e.p, HLL_MAX_RANK));
  }
  return { days, peaks };
}

/**
 * A page's registers and peaks as last read from the store, for a second: a page read by many
 * clients costs one store read of them per second, not one per read. Viewers always come fresh.
 */
export class SeriesCache {
  readonly #pages = new Map<string, { readonly at: number; readonly summary: SeriesSummary }>();

  /** `dc`: this node's DC, whose peaks the summary keeps. */
  async get(store: Store, page: string, dc: string, now: number): Promise<SeriesSummary> {
    const cached = this.#pages.get(page);
    if (cached !== undefined && now - cached.at < SERIES_CACHE_MS) return cached.summary;
    let record: PageRecord;
    try {
      record = await store.loadPrefixed(page, [UNIQUE_PREFIX, PEAK_MINUTE_PREFIX, PEAK_HOUR_PREFIX]);
    } catch (err) {
      if (err instanceof StoreError)
        throw new ProtocolError("unavailable", "the store did not answer; retry");
      throw err;
    }
    const summary = summaryOf(record, dc);
    this.#pages.delete(page);
    this.#pages.set(page, { at: now, summary });
    // Insertion order is age order: the oldest go first, and so does whatever can serve no read.
    for (const [oldest, { at }] of this.#pages) {
      if (this.#pages.size <= SERIES_CACHE_PAGES && now - at < SERIES_CACHE_MS) break;
      this.#pages.delete(oldest);
    }
    return summary;
  }

  /** Pages kept now (for tests). */
  get size(): number {
    return this.#pages.size;
  }
}

export async function readStats(
  registry: ActorRegistry,
  series: { readonly cache: SeriesCache; readonly store: Store },
  dc: string,
  request: StatsRequest,
  partition: number,
): Promise<NodeReply> {
  const { page } = request;
  const counters = await registry.read(page, partition);
  const now = registry.now();
  const summary = await series.cache.get(series.store, page, dc, now);
  const own = (name: string): number => summary.peaks.get(name) ?? 0;
  const { minutes, hours } = peakSpans(now);
  const today = dayOf(now);
  const ranks = new Map<number, number>();
  for (const day of [today - 1, today]) {
    const registers = summary.days.get(day);
    if (registers === undefined) continue;
    for (let r = 0; r < registers.length; r++)
      if (registers[r]! > 0) ranks.set(r, Math.max(ranks.get(r) ?? 0, registers[r]!));
  }
  return {
    type: "page_stats",
    page,
    counters,
    peak1h: Math.max(0, ...minutes.map((m) => own(peakMinuteOf(m)))),
    peak24h: Math.max(0, ...hours.map((h) => own(peakHourOf(h)))),
    unique24h: estimateDistinct(ranks),
    ts: now,
  };
}
