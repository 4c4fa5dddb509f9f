/**
 * `GET /v1/pages/{page}/stats`: a page's state (as a snapshot), the most viewers this DC showed in
 * the last hour and day (its peak entries, page_series.ts), and the distinct visitors of the
 * current and previous UTC day over every DC (the per-register max of every DC's HyperLogLog
 * registers of both days).
 */
import { estimateDistinct } from "@livecount/crdt";
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
/** Pages whose registers and peaks are kept at once: past it the oldest go. */
const SERIES_CACHE_PAGES = 10_000;

/**
 * A page's registers and peaks as last read from the store, for a second: a page read by many
 * clients costs one store read of them per second, not one per read. Viewers always come fresh.
 */
export class SeriesCache {
  readonly #pages = new Map<string, { readonly at: number; readonly record: PageRecord }>();

  async get(store: Store, page: string, now: number): Promise<PageRecord> {
    const cached = this.#pages.get(page);
    if (cached !== undefined && now - cached.at < SERIES_CACHE_MS) return cached.record;
    let record: PageRecord;
    try {
      record = await store.loadPrefixed(page, [UNIQUE_PREFIX, PEAK_MINUTE_PREFIX, PEAK_HOUR_PREFIX]);
    } catch (err) {
      if (err instanceof StoreError)
        throw new ProtocolError("unavailable", "the store did not answer; retry");
      throw err;
    }
    this.#pages.delete(page);
    this.#pages.set(page, { at: now, record });
    // Insertion order is age order: the oldest go first.
    for (const oldest of this.#pages.keys()) {
      if (this.#pages.size <= SERIES_CACHE_PAGES) break;
      this.#pages.delete(oldest);
    }
    return record;
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
  const record = await series.cache.get(series.store, page, now);
  const own = (name: string): number =>
    Object.hasOwn(record, name) && Object.hasOwn(record[name]!, dc) ? record[name]![dc]!.p : 0;
  const { minutes, hours } = peakSpans(now);
  const today = dayOf(now);
  const ranks = new Map<number, number>();
  for (const [name, entries] of Object.entries(record)) {
    const parts = uniqueRegisterParts(name);
    if (parts === undefined || parts.day < today - 1 || parts.day > today) continue;
    for (const e of Object.values(entries))
      ranks.set(parts.register, Math.max(ranks.get(parts.register) ?? 0, e.p));
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
