/**
 * Field checks shared by the decoders of bus messages: each returns the checked value or throws
 * ProtocolError("bad_frame"), and maps become plain objects whose keys (even "__proto__") stay own
 * properties.
 */
import { isEntry, type Entries, type Entry } from "@livecount/crdt";
import { ProtocolError } from "./errors.js";
import { isCounterName, isInternalId, isPageId, isPresenceCounterName, isViewerKey } from "./ids.js";
import { MAX_PARTITIONS, MAX_VIEWER_SOCKETS, type PresenceOp } from "./internal.js";
import { isTombstoneCounter } from "./visibility.js";
import { isSeriesCounter } from "./series.js";

export type Fields = ReadonlyMap<unknown, unknown>;

const PROTO_KEY = "__proto__";
export type Check<T> = (v: unknown) => v is T;

export function malformed(message: string): never {
  throw new ProtocolError("bad_frame", message);
}

export function fieldsOf(v: unknown, what: string): Fields {
  if (!(v instanceof Map)) malformed(`${what} must be a map`);
  return v;
}

export function field<T>(m: Fields, key: string, check: Check<T>): T {
  const v = m.get(key);
  if (!check(v)) malformed(`field ${key} is missing or malformed`);
  return v;
}

export const isString = (v: unknown): v is string => typeof v === "string";
export const isBoolean = (v: unknown): v is boolean => typeof v === "boolean";
export const isSafeInteger = (v: unknown): v is number => Number.isSafeInteger(v);
/** Counts, partitions, hops and millisecond timestamps: non-negative safe integers. */
export const isNatural = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;

/** A natural number field's value, or malformed. */
export function naturalOf(v: unknown): number {
  if (!isNatural(v)) malformed("a count is not a natural number");
  return v;
}
export const isPositive = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) > 0;
/** What a gateway holds of one viewer on a page: 1..MAX_VIEWER_SOCKETS sockets. */
const isViewerSockets = (v: unknown): v is number => isPositive(v) && v <= MAX_VIEWER_SOCKETS;
/** Counter names inside the system: a public name, a presence counter, a tombstone or a series entry. */
export const isCounterKey = (v: unknown): v is string =>
  isCounterName(v) || isPresenceCounterName(v) || isTombstoneCounter(v) || isSeriesCounter(v);

export function listOf<T>(v: unknown, item: (v: unknown) => T, what: string): T[] {
  if (!Array.isArray(v)) malformed(`${what} must be an array`);
  return v.map(item);
}

/** A list of 1..`max` items: a batch request or its answers. */
export function batchOf<T>(v: unknown, item: (v: unknown) => T, what: string, max: number): T[] {
  if (!Array.isArray(v) || v.length === 0 || v.length > max) malformed(`${what} must hold 1..${max} items`);
  return v.map(item);
}

/**
 * A map with checked keys as a plain object (or in `into`); keys such as "__proto__" stay own
 * properties.
 */
export function recordOf<T>(
  v: unknown,
  isKey: Check<string>,
  value: (v: unknown) => T,
  what: string,
  into: Record<string, T> = {},
): Record<string, T> {
  for (const [key, item] of fieldsOf(v, what)) {
    if (!isKey(key)) malformed(`${what} has a malformed key`);
    setOwn(into, key, value(item));
  }
  return into;
}

/**
 * `recordOf` for a map keyed by page id: an object without prototype, which V8 keeps as a hash
 * table from the start. Page ids are new keys on nearly every message, and a plain object gets a new
 * hidden class for each new key: for a heal's pages (pagesOf) or a gateway's resync (presence_sync),
 * plain objects took about three times as long to build (loadtest/bench/page_keyed.js). Read it
 * with Object.entries, Object.keys, Object.hasOwn or an index.
 */
export function pageRecordOf<T>(
  v: unknown,
  isKey: Check<string>,
  value: (v: unknown) => T,
  what: string,
): Record<string, T> {
  return recordOf(v, isKey, value, what, Object.create(null) as Record<string, T>);
}

/**
 * A map keyed by page id built from `entries` as `pageRecordOf` builds one: a table without
 * prototype, where "__proto__" is a page like any other. Object.fromEntries of new page ids took
 * about three times as long (the hidden classes again).
 */
export function pageRecordFrom<T>(entries: Iterable<readonly [string, T]>): Record<string, T> {
  const out = Object.create(null) as Record<string, T>;
  for (const [key, value] of entries) out[key] = value;
  return out;
}

/** `out[key] = value`, except that "__proto__" becomes an own property instead of the prototype. */
function setOwn<T>(out: Record<string, T>, key: string, value: T): void {
  if (key === PROTO_KEY) {
    Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  } else {
    out[key] = value;
  }
}

export function entryOf(v: unknown): Entry {
  const m = fieldsOf(v, "entry");
  const entry = { p: m.get("p"), n: m.get("n") };
  if (!isEntry(entry)) malformed("entry must hold two non-negative safe integers p and n");
  return entry;
}

export function entriesOf(v: unknown): Entries {
  return recordOf(v, isInternalId, entryOf, "entries");
}

export function presenceOpOf(v: unknown): PresenceOp {
  const m = fieldsOf(v, "presence op");
  const op = {
    page: field(m, "page", isPageId),
    viewer: field(m, "viewer", isViewerKey),
    present: field(m, "present", isBoolean),
  };
  const drop = m.get("drop");
  const sockets = m.get("sockets");
  const active = m.get("active");
  if (drop !== undefined && !isBoolean(drop)) malformed("field drop is malformed");
  if (sockets !== undefined && !isViewerSockets(sockets)) malformed("field sockets is malformed");
  if (active !== undefined && !isBoolean(active)) malformed("field active is malformed");
  if (drop === undefined && sockets === undefined && active === undefined) return op;
  return {
    ...op,
    ...(drop !== undefined ? { drop } : {}),
    ...(sockets !== undefined ? { sockets } : {}),
    ...(active !== undefined ? { active } : {}),
  };
}

/** Socket counts per viewer (`PresenceSync.sockets`). */
export function socketCountsOf(v: unknown): number[] {
  return listOf(
    v,
    (n) => (isViewerSockets(n) ? n : malformed(`a socket count is not in 1..${MAX_VIEWER_SOCKETS}`)),
    "sockets",
  );
}

function viewerKeyOf(v: unknown): string {
  if (!isViewerKey(v)) malformed("viewer key is malformed");
  return v;
}

export function viewerKeysOf(v: unknown): string[] {
  return listOf(v, viewerKeyOf, "viewers");
}

export function pageIdOf(v: unknown): string {
  if (!isPageId(v)) malformed("page id is malformed");
  return v;
}

export function partitionOf(v: unknown): number {
  if (!isNatural(v) || v >= MAX_PARTITIONS) malformed("partition is malformed");
  return v;
}

export function partitionListOf(v: unknown): number[] {
  if (Array.isArray(v) && v.length > MAX_PARTITIONS) malformed("too many partitions");
  return listOf(v, partitionOf, "partitions");
}

/** The named fields that are present, each a natural number. */
export function optionalNaturals(m: Fields, ...names: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const name of names) {
    const v = m.get(name);
    if (v === undefined) continue;
    if (!isNatural(v)) malformed(`field ${name} is malformed`);
    out[name] = v;
  }
  return out;
}
