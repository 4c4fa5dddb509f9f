/**
 * Which counters of a page a reader shows: the one rule behind HTTP reads, count frames and
 * listings, so they can never disagree.
 *
 * Internal counters have names starting with '@' (outside the public alphabet): presence under
 * VIEWERS_COUNTER, tombstones under `@del:<counter>`. They are never shown as counters.
 *
 * A delete is expressed with PN-counter entries only, so it replicates like any other write. The
 * owner that deletes counter `c`:
 * 1. resets `c` to zero as it observes it (adds the observed value to its data center's `n`, or
 *    to `p` if negative);
 * 2. sets its data center's entry of `@del:c` to `p = activity(c)` right after that reset, where
 *    activity is the sum over data centers of `p + n`.
 *
 * Activity grows with every change and never shrinks, so `activity(c) > max over DCs of @del:c.p`
 * says exactly that some change happened that the latest delete did not see: a later increment
 * anywhere, or one made concurrently elsewhere (add-wins). Such a counter is visible again and,
 * thanks to the reset, counts from zero. Otherwise it is hidden.
 */
import type { Entries } from "@livecount/crdt";
import { isCounterName } from "./ids.js";

/** Prefix of the tombstone counter of a deleted counter. */
export const TOMBSTONE_PREFIX = "@del:";

/** The tombstone counter of a public counter. */
export function tombstoneOf(counter: string): string {
  return `${TOMBSTONE_PREFIX}${counter}`;
}

/** True for a tombstone counter name: `@del:` and a public counter name. */
export function isTombstoneCounter(v: unknown): v is string {
  return (
    typeof v === "string" && v.startsWith(TOMBSTONE_PREFIX) && isCounterName(v.slice(TOMBSTONE_PREFIX.length))
  );
}

/** The counter a tombstone deletes, or undefined for any other counter. */
export function deletedCounterOf(name: string): string | undefined {
  return isTombstoneCounter(name) ? name.slice(TOMBSTONE_PREFIX.length) : undefined;
}

/** Internal counters (presence, tombstones) are never shown as counters. */
export function isInternalCounter(name: string): boolean {
  return name.startsWith("@");
}

/** A counter's activity: the sum over data centers of p + n. Grows with every change. */
export function activityOf(entries: Entries): number {
  let a = 0;
  for (const e of Object.values(entries)) a += e.p + e.n;
  return a;
}

/** The activity the latest delete saw: the largest p of the tombstone over data centers (0: none). */
export function deletedAt(tombstone: Entries): number {
  let at = 0;
  for (const e of Object.values(tombstone)) at = Math.max(at, e.p);
  return at;
}

/**
 * A presence counter's value over the data centers that count now (`isLive`: a DC silent past its
 * lease does not), never below 0: what readers show as viewers, active viewers or connections.
 */
export function livePresenceOf(entries: Entries, isLive: (dc: string) => boolean): number {
  let total = 0;
  for (const [dc, e] of Object.entries(entries)) if (isLive(dc)) total += e.p - e.n;
  return Math.max(0, total);
}

/** The value of a counter: sum(p) - sum(n). */
export function valueOf(entries: Entries): number {
  let v = 0;
  for (const e of Object.values(entries)) v += e.p - e.n;
  return v;
}

/**
 * The public counters of a page that readers show, in the given order: internal counters left
 * out, and deleted ones left out until they change again. `entriesOf` gives every data center's
 * entry of a counter; it is only called for counters that have a tombstone.
 */
export function visibleCounters<T>(
  counters: Iterable<readonly [string, T]>,
  entriesOf: (counter: T) => Entries,
): Array<[string, T]> {
  const shown: Array<[string, T]> = [];
  let tombstones: Map<string, T> | undefined;
  for (const [name, counter] of counters) {
    if (!isInternalCounter(name)) shown.push([name, counter]);
    else if (isTombstoneCounter(name))
      (tombstones ??= new Map()).set(name.slice(TOMBSTONE_PREFIX.length), counter);
  }
  if (tombstones === undefined) return shown;
  const tombs = tombstones;
  return shown.filter(([name, counter]) => {
    const tomb = tombs.get(name);
    return tomb === undefined || activityOf(entriesOf(counter)) > deletedAt(entriesOf(tomb));
  });
}
