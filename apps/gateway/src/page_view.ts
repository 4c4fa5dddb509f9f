import { pageSubject, type Subscription } from "@livecount/bus";
import type { DcLiveness } from "@livecount/cluster";
import { PNCounter } from "@livecount/crdt";
import { isSeriesCounter, type CountFrame } from "@livecount/protocol";
import type { Backoff, TimerHandle } from "@livecount/runtime";
import { totalsOf } from "./page_reading.js";

/**
 * This gateway's view of one watched page: every data center's entries, merged. A gateway may watch
 * a page for one viewer, so what a view holds is what each such page costs.
 */
export class PageView {
  readonly counters = new Map<string, PNCounter>();
  watchers = 0;
  loaded = false;
  /** The last frame sent, to skip unchanged values. */
  sent: CountFrame | undefined;
  subscription: Subscription | undefined;
  readonly page: string;
  readonly partition: number;
  /** The page's subject: its updates come on it (the string the bus holds too). */
  readonly subject: string;
  /** The retry delays of its snapshot, made at its first failure. */
  backoff: Backoff | undefined;
  retryTimer: TimerHandle | undefined;

  constructor(page: string, partition: number) {
    this.page = page;
    this.partition = partition;
    this.subject = pageSubject(page, partition);
  }

  merge(counters: Readonly<Record<string, Readonly<Record<string, { p: number; n: number }>>>>): boolean {
    let changed = false;
    for (const [name, entries] of Object.entries(counters)) {
      // Time buckets travel with a page's updates; counts do not show them.
      if (isSeriesCounter(name)) continue;
      let c = this.counters.get(name);
      if (c === undefined) this.counters.set(name, (c = new PNCounter()));
      changed = c.mergeAll(entries) || changed;
    }
    return changed;
  }

  /** Merges one data center's entry of each counter (a page update). */
  mergeFrom(dc: string, counters: Readonly<Record<string, { p: number; n: number }>>): boolean {
    let changed = false;
    for (const [name, entry] of Object.entries(counters)) {
      if (isSeriesCounter(name)) continue;
      let c = this.counters.get(name);
      if (c === undefined) this.counters.set(name, (c = new PNCounter()));
      changed = c.merge(dc, entry) || changed;
    }
    return changed;
  }

  /**
   * The count frame: viewers from live data centers only (a partitioned DC's viewers have
   * reconnected elsewhere or will be back), durable counters from every DC (they never expire).
   */
  frame(page: string, ts: number, liveness: DcLiveness): CountFrame {
    const entries = Object.fromEntries([...this.counters].map(([name, c]) => [name, c.entries()]));
    const t = totalsOf(entries, liveness);
    return {
      type: "count",
      page,
      viewers: t.viewers,
      active: t.active,
      connections: t.connections,
      counters: t.counters,
      ts,
      dcs: t.dcs,
      lag_ms: t.lag_ms,
    };
  }
}

/** Whether two frames show the same values (their times aside). */
export function sameValue(a: CountFrame | undefined, b: CountFrame): boolean {
  if (a === undefined || a.viewers !== b.viewers) return false;
  if (a.active !== b.active || a.connections !== b.connections) return false;
  if ((a.dcs ?? []).join() !== (b.dcs ?? []).join()) return false;
  const ak = Object.keys(a.counters);
  if (ak.length !== Object.keys(b.counters).length) return false;
  return ak.every((k) => a.counters[k] === b.counters[k]);
}
