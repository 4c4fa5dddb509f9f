/**
 * A page's time series besides window buckets (windows.ts), kept as PN-counter entries of each data
 * center that expire once no read reaches them, and never held by page actors or gateways:
 *
 * - unique visitors: HyperLogLog registers per UTC day, `@u:<day>:<register>` with `p` = the
 *   register's rank (merged by max, like any entry), one entry per register a visitor reached;
 * - peaks of the viewers a data center showed: `@pm:<minute>` and `@ph:<hour>` with `p` = the most
 *   viewers in that minute or hour, written by that DC's owner only.
 */
import { HLL_REGISTERS } from "@livecount/crdt";
import { isWindowCounter } from "./windows.js";

export const DAY_MS = 86_400_000;
export const HOUR_MS = 3_600_000;
const MINUTE_MS = 60_000;

export const UNIQUE_PREFIX = "@u:";
export const PEAK_MINUTE_PREFIX = "@pm:";
export const PEAK_HOUR_PREFIX = "@ph:";

/**
 * The natural number written in `name` from `start` to `end` (exclusive) in canonical decimal (no
 * leading zero, at most 15 digits), or -1. Names are checked on every flush and every received
 * entry: this reads them in place, with no regular expression and no substring.
 */
function naturalIn(name: string, start: number, end: number): number {
  const length = end - start;
  if (length < 1 || length > 15 || (length > 1 && name.charCodeAt(start) === 48)) return -1;
  let n = 0;
  for (let i = start; i < end; i++) {
    const digit = name.charCodeAt(i) - 48;
    if (digit < 0 || digit > 9) return -1;
    n = n * 10 + digit;
  }
  return n;
}

export function dayOf(ms: number): number {
  return Math.floor(ms / DAY_MS);
}

export function hourOf(ms: number): number {
  return Math.floor(ms / HOUR_MS);
}

export function uniqueRegisterOf(day: number, register: number): string {
  return `${UNIQUE_PREFIX}${day}:${register}`;
}

/** The day and register of a unique-visitor entry, or undefined for any other name. */
export function uniqueRegisterParts(name: string): { day: number; register: number } | undefined {
  if (!isUniqueRegister(name)) return undefined;
  const cut = name.indexOf(":", UNIQUE_PREFIX.length);
  return {
    day: naturalIn(name, UNIQUE_PREFIX.length, cut),
    register: naturalIn(name, cut + 1, name.length),
  };
}

/** Whether `name` is a unique-visitor entry (uniqueRegisterParts without building the parts). */
function isUniqueRegister(name: string): boolean {
  if (!name.startsWith(UNIQUE_PREFIX)) return false;
  const cut = name.indexOf(":", UNIQUE_PREFIX.length);
  if (cut < 0 || naturalIn(name, UNIQUE_PREFIX.length, cut) < 0) return false;
  const register = naturalIn(name, cut + 1, name.length);
  return register >= 0 && register < HLL_REGISTERS;
}

export function peakMinuteOf(minute: number): string {
  return `${PEAK_MINUTE_PREFIX}${minute}`;
}

export function peakHourOf(hour: number): string {
  return `${PEAK_HOUR_PREFIX}${hour}`;
}

function isPeakCounter(name: string): boolean {
  for (const prefix of [PEAK_MINUTE_PREFIX, PEAK_HOUR_PREFIX])
    if (name.startsWith(prefix)) return naturalIn(name, prefix.length, name.length) >= 0;
  return false;
}

/** The name prefixes of every kind of time bucket. */
export const SERIES_PREFIXES: readonly string[] = [
  "@w:",
  UNIQUE_PREFIX,
  PEAK_MINUTE_PREFIX,
  PEAK_HOUR_PREFIX,
];

/** Entries of a page's time series (window buckets, unique-visitor registers, peaks). */
export function isSeriesCounter(name: unknown): name is string {
  // Every series name starts with "@" and no counter name does: most names are out at once.
  return (
    typeof name === "string" &&
    name.charCodeAt(0) === AT &&
    (isWindowCounter(name) || isUniqueRegister(name) || isPeakCounter(name))
  );
}

const AT = 0x40;

/** The minutes (the current one included) a "last hour" peak reads, and the hours a "last day" one. */
export function peakSpans(now: number): { minutes: number[]; hours: number[] } {
  const minute = Math.floor(now / MINUTE_MS);
  const hour = hourOf(now);
  return {
    minutes: Array.from({ length: 60 }, (_, i) => minute - i),
    hours: Array.from({ length: 24 }, (_, i) => hour - i),
  };
}
