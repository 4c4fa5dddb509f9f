/** Copies of what the memory store holds of a page, as its reads return them. */
import type { Entry } from "@livecount/crdt";
import type { PageEntries } from "./memory_digests.js";
import type { PageRecord } from "./store.js";

/** Every counter's entries of a page (empty for none). */
export function recordOf(counters: PageEntries | undefined): PageRecord {
  // fromEntries defines own properties: a counter named "__proto__" stays a counter.
  return Object.fromEntries(
    [...(counters ?? [])].map(([counter, dcs]) => [
      counter,
      Object.fromEntries([...dcs].map(([dc, e]) => [dc, { p: e.p, n: e.n }])),
    ]),
  );
}

/** The named entries of a page, undefined where it holds none. */
export function entriesOf(
  counters: PageEntries | undefined,
  refs: ReadonlyArray<{ readonly counter: string; readonly dc: string }>,
): Array<Entry | undefined> {
  return refs.map(({ counter, dc }) => {
    const e = counters?.get(counter)?.get(dc);
    return e === undefined ? undefined : { p: e.p, n: e.n };
  });
}
