/** Copies of what the memory store holds of a page, as its reads return them. */
import type { Entry } from "@livecount/crdt";
import type { PageEntries } from "./memory_digests.js";
import type { CounterRef, PageRecord } from "./store.js";

/** Every counter's entries of a page (empty for none), or those whose name `keep` keeps. */
export function recordOf(
  counters: PageEntries | undefined,
  keep: (counter: string) => boolean = () => true,
): PageRecord {
  // fromEntries defines own properties: a counter named "__proto__" stays a counter.
  return Object.fromEntries(
    [...(counters ?? [])]
      .filter(([counter]) => keep(counter))
      .map(([counter, dcs]) => [
        counter,
        Object.fromEntries([...dcs].map(([dc, e]) => [dc, { p: e.p, n: e.n }])),
      ]),
  );
}

/** The named entries of a page, undefined where it holds none. */
export function entriesOf(
  counters: PageEntries | undefined,
  refs: readonly CounterRef[],
): Array<Entry | undefined> {
  return refs.map(({ counter, dc }) => {
    const e = counters?.get(counter)?.get(dc);
    return e === undefined ? undefined : { p: e.p, n: e.n };
  });
}
