/**
 * A page record without its window buckets (`@w:<counter>:<minute>`): what tests about counters and
 * tombstones compare, since every increment also writes its minute's bucket.
 */
import { isWindowCounter } from "@livecount/protocol";

export function withoutBuckets<T>(record: Readonly<Record<string, T>>): Record<string, T> {
  // fromEntries defines own properties, so a counter named "__proto__" stays a counter.
  return Object.fromEntries(Object.entries(record).filter(([name]) => !isWindowCounter(name)));
}
