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

export async function readStats(
  registry: ActorRegistry,
  store: Store,
  dc: string,
  request: StatsRequest,
  partition: number,
): Promise<NodeReply> {
  const { page } = request;
  const counters = await registry.read(page, partition);
  const now = registry.now();
  let series: PageRecord;
  try {
    series = await store.loadPrefixed(page, [UNIQUE_PREFIX, PEAK_MINUTE_PREFIX, PEAK_HOUR_PREFIX]);
  } catch (err) {
    if (err instanceof StoreError) throw new ProtocolError("unavailable", "the store did not answer; retry");
    throw err;
  }
  const own = (name: string): number =>
    Object.hasOwn(series, name) && Object.hasOwn(series[name]!, dc) ? series[name]![dc]!.p : 0;
  const { minutes, hours } = peakSpans(now);
  const today = dayOf(now);
  const ranks = new Map<number, number>();
  for (const [name, entries] of Object.entries(series)) {
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
