/**
 * Time-windowed counters (seed 004): a sliding window of one-minute buckets kept as PN-counter
 * entries, one per counter, minute and data center, named `@w:<counter>:<minute>` (minute =
 * epoch-ms / 60,000, rounded down). An increment adds its change to the current minute's bucket of
 * its data center in the same atomic step as the counter itself, so a bucket counts exactly the
 * changes that counted. Buckets replicate and converge like every entry; each store removes a bucket
 * once no window can reach it (`windowBucketExpiresAt`).
 */
import { isCounterName } from "./ids.js";

export const WINDOW_PREFIX = "@w:";
/** Width of a bucket. */
export const WINDOW_BUCKET_MS = 60_000;
/** Longest window that can be read, in seconds: a day. */
export const MAX_WINDOW_S = 86_400;

/** The minute a time falls in. */
export function minuteOf(ms: number): number {
  return Math.floor(ms / WINDOW_BUCKET_MS);
}

/** The bucket counter of `counter` for `minute`. */
export function windowCounterOf(counter: string, minute: number): string {
  return `${WINDOW_PREFIX}${counter}:${minute}`;
}

/** The counter and minute of a bucket counter, or undefined for any other name. */
export function windowBucketOf(name: string): { counter: string; minute: number } | undefined {
  if (!name.startsWith(WINDOW_PREFIX)) return undefined;
  const cut = name.lastIndexOf(":");
  const counter = name.slice(WINDOW_PREFIX.length, cut);
  const digits = name.slice(cut + 1);
  if (cut < WINDOW_PREFIX.length || !isCounterName(counter) || !/^(0|[1-9]\d{0,14})$/.test(digits))
    return undefined;
  return { counter, minute: Number(digits) };
}

export function isWindowCounter(name: unknown): name is string {
  return typeof name === "string" && windowBucketOf(name) !== undefined;
}

/**
 * The minutes whose buckets make up the window of the last `seconds` at `now`: every minute that
 * overlaps (now - seconds, now], the current one included.
 */
export function windowMinutes(now: number, seconds: number): { from: number; to: number } {
  return { from: minuteOf(now - seconds * 1000 + 1), to: minuteOf(now) };
}
