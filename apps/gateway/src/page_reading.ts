/**
 * How the HTTP API shows a page's state (from its owner's snapshot): summed totals, or each data
 * center's raw entries. Which counters show is decided by `visibleCounters` from the protocol
 * package, the rule count frames follow too.
 */
import type { Entry } from "@livecount/crdt";
import {
  ACTIVE_COUNTER,
  CONNECTIONS_COUNTER,
  VIEWERS_COUNTER,
  livePresenceOf,
  valueOf,
  visibleCounters,
  type PageStateReply,
  type PageStatsReply,
} from "@livecount/protocol";

/** Which data centers count right now (DcLiveness). */
export interface Liveness {
  /** This process's data center: always live. */
  readonly localDc: string;
  isLive(dc: string): boolean;
  /** How long ago the DC was last heard, in ms (0 for this one). */
  lagMs(dc: string): number;
}

/** `GET /v1/pages/{page}/counter`, and each page of `GET /v1/counters`. */
export interface PageTotalsBody {
  readonly page: string;
  /** Equals `viewers` (protocol v1). */
  readonly count: number;
  readonly viewers: number;
  /** Viewers with an active socket on the page (a visible tab). */
  readonly active: number;
  /** Open sockets joined to the page. */
  readonly connections: number;
  readonly counters: Record<string, number>;
  readonly updated_at: number;
  /** Live data centers whose entries make up the values. */
  readonly dcs: string[];
  /** How stale the oldest contributing data center may be, in ms. */
  readonly lag_ms: number;
}

/** Each page of `GET /v1/counters?raw=true`: every live DC's presence entries, every DC's counter entries. */
export interface PageRawBody {
  readonly page: string;
  readonly viewers: Record<string, Entry>;
  readonly active: Record<string, Entry>;
  readonly connections: Record<string, Entry>;
  readonly counters: Record<string, Record<string, Entry>>;
  readonly updated_at: number;
  readonly dcs: string[];
  readonly lag_ms: number;
}

function ownEntry(record: Readonly<Record<string, unknown>>, key: string): unknown {
  return Object.hasOwn(record, key) ? record[key] : undefined;
}

/** Every DC's entries of every counter of a page, by counter name. */
type PageEntries = Readonly<Record<string, Readonly<Record<string, Entry>>>>;

/** What every reader shows of a page: HTTP reads and count frames alike. */
export interface Totals {
  readonly viewers: number;
  readonly active: number;
  readonly connections: number;
  readonly counters: Record<string, number>;
  readonly dcs: string[];
  readonly lag_ms: number;
}

/** This DC and the live ones with entries on the page, and how stale the oldest of them may be. */
function contributors(counters: PageEntries, liveness: Liveness): { dcs: string[]; lag_ms: number } {
  const dcs = new Set<string>([liveness.localDc]);
  let lag = 0;
  for (const entries of Object.values(counters)) {
    for (const dc of Object.keys(entries)) {
      if (dcs.has(dc) || !liveness.isLive(dc)) continue;
      dcs.add(dc);
      lag = Math.max(lag, liveness.lagMs(dc));
    }
  }
  return { dcs: [...dcs].sort(), lag_ms: Math.round(lag) };
}

/** A presence counter's entries from live data centers only: a partitioned DC's viewers drop out (invariant 4). */
function livePresence(counters: PageEntries, counter: string, liveness: Liveness): Array<[string, Entry]> {
  const entries = (ownEntry(counters, counter) ?? {}) as Record<string, Entry>;
  return Object.entries(entries).filter(([dc]) => liveness.isLive(dc));
}

/** A presence counter summed over live data centers. */
function presenceTotal(counters: PageEntries, counter: string, liveness: Liveness): number {
  const entries = (ownEntry(counters, counter) ?? {}) as Record<string, Entry>;
  return livePresenceOf(entries, (dc) => liveness.isLive(dc));
}

/** Summed over data centers; durable counters never expire, presence only counts live DCs. */
export function totalsOf(entries: PageEntries, liveness: Liveness): Totals {
  // fromEntries defines own properties, so a counter named "__proto__" stays a counter.
  const counters = Object.fromEntries(
    visibleCounters(Object.entries(entries), (e) => e).map(([name, e]) => [name, valueOf(e)]),
  );
  return {
    viewers: presenceTotal(entries, VIEWERS_COUNTER, liveness),
    active: presenceTotal(entries, ACTIVE_COUNTER, liveness),
    connections: presenceTotal(entries, CONNECTIONS_COUNTER, liveness),
    counters,
    ...contributors(entries, liveness),
  };
}

export function totalsBody(page: string, state: PageStateReply, liveness: Liveness): PageTotalsBody {
  const t = totalsOf(state.counters, liveness);
  return {
    page,
    count: t.viewers,
    viewers: t.viewers,
    active: t.active,
    connections: t.connections,
    counters: t.counters,
    updated_at: state.ts,
    dcs: t.dcs,
    lag_ms: t.lag_ms,
  };
}

/** Each DC's `{p, n}` as plain objects, nothing else an entry may carry. */
export function copyEntries(entries: Iterable<readonly [string, Entry]>): Record<string, Entry> {
  return Object.fromEntries([...entries].map(([dc, e]) => [dc, { p: e.p, n: e.n }]));
}

/** Every DC's `{p, n}` of the visible counters; their sum per counter is the summed value. */
export function rawBody(page: string, state: PageStateReply, liveness: Liveness): PageRawBody {
  return {
    page,
    viewers: copyEntries(livePresence(state.counters, VIEWERS_COUNTER, liveness)),
    active: copyEntries(livePresence(state.counters, ACTIVE_COUNTER, liveness)),
    connections: copyEntries(livePresence(state.counters, CONNECTIONS_COUNTER, liveness)),
    counters: Object.fromEntries(
      visibleCounters(Object.entries(state.counters), (e) => e).map(([name, e]) => [
        name,
        copyEntries(Object.entries(e)),
      ]),
    ),
    updated_at: state.ts,
    ...contributors(state.counters, liveness),
  };
}

/** `GET /v1/pages/{page}/stats`. */
export interface PageStatsBody {
  readonly page: string;
  readonly viewers: number;
  readonly active: number;
  readonly connections: number;
  /** The most viewers this data center showed in the last hour and day (at least the viewers now). */
  readonly peak_viewers: { readonly "1h": number; readonly "24h": number };
  /** Distinct viewers of the current and the previous UTC day, over every data center (estimated). */
  readonly unique_visitors: { readonly "24h": number };
  readonly updated_at: number;
}

export function statsBody(stats: PageStatsReply, liveness: Liveness): PageStatsBody {
  const t = totalsOf(stats.counters, liveness);
  return {
    page: stats.page,
    viewers: t.viewers,
    active: t.active,
    connections: t.connections,
    // The owner records what changes; the value now counts even when nothing changed for a while.
    peak_viewers: { "1h": Math.max(stats.peak1h, t.viewers), "24h": Math.max(stats.peak24h, t.viewers) },
    unique_visitors: { "24h": stats.unique24h },
    updated_at: stats.ts,
  };
}
