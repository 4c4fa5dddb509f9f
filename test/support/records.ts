/**
 * A page record without its time buckets (window buckets, unique-visitor registers, peaks): what
 * tests about counters and tombstones compare, since increments and viewers also write those.
 */
import { isSeriesCounter } from "@livecount/protocol";

export function withoutBuckets<T>(record: Readonly<Record<string, T>>): Record<string, T> {
  // fromEntries defines own properties, so a counter named "__proto__" stays a counter.
  return Object.fromEntries(Object.entries(record).filter(([name]) => !isSeriesCounter(name)));
}
