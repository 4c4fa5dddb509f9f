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

const NATURAL = /^(0|[1-9]\d{0,14})$/;

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
  if (!name.startsWith(UNIQUE_PREFIX)) return undefined;
  const [day, register, ...rest] = name.slice(UNIQUE_PREFIX.length).split(":");
  if (rest.length > 0 || !NATURAL.test(day ?? "") || !NATURAL.test(register ?? "")) return undefined;
  if (Number(register) >= HLL_REGISTERS) return undefined;
  return { day: Number(day), register: Number(register) };
}

export function peakMinuteOf(minute: number): string {
  return `${PEAK_MINUTE_PREFIX}${minute}`;
}

export function peakHourOf(hour: number): string {
  return `${PEAK_HOUR_PREFIX}${hour}`;
}

function isPeakCounter(name: string): boolean {
  for (const prefix of [PEAK_MINUTE_PREFIX, PEAK_HOUR_PREFIX])
    if (name.startsWith(prefix)) return NATURAL.test(name.slice(prefix.length));
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
  return (
    typeof name === "string" &&
    (isWindowCounter(name) || uniqueRegisterParts(name) !== undefined || isPeakCounter(name))
  );
}

/** The minutes (the current one included) a "last hour" peak reads, and the hours a "last day" one. */
export function peakSpans(now: number): { minutes: number[]; hours: number[] } {
  const minute = Math.floor(now / MINUTE_MS);
  const hour = hourOf(now);
  return {
    minutes: Array.from({ length: 60 }, (_, i) => minute - i),
    hours: Array.from({ length: 24 }, (_, i) => hour - i),
  };
}
