/**
 * A page's deleted counters as its actor holds them (docs/architecture.md, "Purging tombstones"):
 * rules over the page's PN-counters by name, a counter's tombstone among them.
 */
import { PNCounter, type Entry } from "@livecount/crdt";
import { activityOf, deletedAt, deletedCounterOf, tombstoneOf } from "@livecount/protocol";
import { purgeableAt } from "@livecount/store";

type Counters = ReadonlyMap<string, PNCounter>;

/** A deleted counter still hidden, whose entry of `dc` is zero. */
export function settledDelete(counters: Counters, counter: string, dc: string): boolean {
  const tomb = counters.get(tombstoneOf(counter));
  if (tomb === undefined) return false;
  const c = counters.get(counter);
  const e = c?.entry(dc) ?? { p: 0, n: 0 };
  return e.p === e.n && activityOf(c?.entries() ?? {}) <= deletedAt(tomb.entries());
}

/**
 * One data center's entry of every counter it has one of (`own`: this DC, every counter), but for
 * deleted counters whose entry there is zero and that stay hidden, and their tombstones: the delete
 * published those once, and sending them again with every presence change would bring a counter
 * another DC purged back there.
 */
export function publishedEntries(counters: Counters, dc: string, own: boolean): Map<string, Entry> {
  const entries = new Map<string, Entry>();
  for (const [name, counter] of counters) {
    const e = counter.entry(dc);
    if (!(own || e.p > 0 || e.n > 0)) continue;
    if (settledDelete(counters, deletedCounterOf(name) ?? name, dc)) continue;
    entries.set(name, e);
  }
  return entries;
}

/** Whether `counters` hold a purgeable copy of a deleted counter (Store.purgeTombstones's rule). */
export function purgeableIn(counters: Counters, counter: string): boolean {
  const tomb = counters.get(tombstoneOf(counter));
  const entries = Object.values(counters.get(counter)?.entries() ?? {});
  return tomb !== undefined && purgeableAt(entries, Object.values(tomb.entries())) !== undefined;
}

/**
 * What survives the purge of `counter` (and its tombstone) from the store: nothing when memory holds
 * a purgeable copy; else other DCs' entries of both, which arrived since the store looked (a like,
 * or a new delete, after the delete) and are written again.
 */
/**
 * Drops a purged counter and its tombstone from `counters`, keeping other DCs' entries that arrived
 * since the store looked (purgeSurvivors); returns those, to be written again.
 */
export function purgeFrom(
  counters: Map<string, PNCounter>,
  counter: string,
  ownDc: string,
): Array<{ name: string; dc: string }> {
  const news = purgeSurvivors(counters, counter, ownDc);
  counters.delete(counter);
  counters.delete(tombstoneOf(counter));
  for (const { name, dc, entry } of news) {
    let c = counters.get(name);
    if (c === undefined) counters.set(name, (c = new PNCounter()));
    c.merge(dc, entry);
  }
  return news;
}

export function purgeSurvivors(
  counters: Counters,
  counter: string,
  ownDc: string,
): Array<{ name: string; dc: string; entry: Entry }> {
  if (purgeableIn(counters, counter)) return [];
  return [counter, tombstoneOf(counter)].flatMap((name) =>
    Object.entries(counters.get(name)?.entries() ?? {})
      .filter(([dc]) => dc !== ownDc)
      .map(([dc, entry]) => ({ name, dc, entry })),
  );
}
