/** Copies of what the memory store holds of a page, as its reads return them, and checks of them. */
import type { Entry } from "@livecount/crdt";
import type { PageEntries } from "./memory_digests.js";
import type { CounterRef, IncrementOp, PageRecord } from "./store.js";

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

/** The entries an increment op changes: its counter's, then each of `also`'s, in this data center. */
export function opRefs(op: IncrementOp): CounterRef[] {
  return [op, ...(op.also ?? []).map((c) => ({ counter: c.counter, dc: op.dc }))];
}

/**
 * Whether every change of `op` leaves p and n safe integers, given the entries it changes as they are
 * (`held`, in `opRefs` order; an absent one of its own counter starts at `startAt`).
 */
export function changesFit(op: IncrementOp, held: ReadonlyArray<Entry | undefined>): boolean {
  const deltas = [op.delta, ...(op.also ?? []).map((c) => c.delta)];
  return deltas.every((delta, i) => {
    const start = i === 0 ? (op.startAt ?? 0) : 0;
    const e = held[i] ?? { p: start, n: start };
    return Number.isSafeInteger(delta > 0 ? e.p + delta : e.n - delta);
  });
}
