/**
 * Reads the server's JSON answers into the SDK's types. Protocol v1 lets servers add fields, so
 * unknown fields are ignored; a missing or mistyped field the SDK needs is a `bad_response`.
 */
import { LivecountError, errorFromCode, type ChangeItem } from "./errors.js";
import type {
  CounterValue,
  PageCounters,
  PageListing,
  RawEntry,
  RawPage,
  PageStats,
  ResetValue,
  WindowValue,
} from "./types.js";

type Json = Record<string, unknown>;

function bad(what: string): LivecountError {
  return new LivecountError("bad_response", `unexpected answer from the server: ${what}`, {
    retryable: false,
  });
}

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function object(v: unknown, what: string): Json {
  if (!isObject(v)) throw bad(`${what} is not an object`);
  return v;
}

function integer(v: unknown, what: string): number {
  if (!Number.isSafeInteger(v)) throw bad(`${what} is not an integer`);
  return v as number;
}

function string(v: unknown, what: string): string {
  if (typeof v !== "string") throw bad(`${what} is not a string`);
  return v;
}

/** `{"likes":3,...}` as a map with own properties only (a counter may be named "__proto__"). */
export function counterMap(v: unknown, what = "counters"): Record<string, number> {
  const entries: Array<[string, number]> = [];
  for (const [name, value] of Object.entries(object(v, what)))
    entries.push([name, integer(value, `${what}.${name}`)]);
  return Object.fromEntries(entries);
}

/** `GET /v1/pages/{page}/stats`. */
export function decodePageStats(body: unknown): PageStats {
  const o = object(body, "stats");
  const peaks = object(o.peak_viewers, "peak_viewers");
  const unique = object(o.unique_visitors, "unique_visitors");
  return {
    page: string(o.page, "page"),
    viewers: integer(o.viewers, "viewers"),
    active: integer(o.active, "active"),
    connections: integer(o.connections, "connections"),
    peakViewers: {
      "1h": integer(peaks["1h"], "peak_viewers.1h"),
      "24h": integer(peaks["24h"], "peak_viewers.24h"),
    },
    uniqueVisitors: { "24h": integer(unique["24h"], "unique_visitors.24h") },
    updatedAt: integer(o.updated_at, "updated_at"),
  };
}

/** `GET /v1/pages/{page}/counters/{counter}/window`: `{page, counter, window_s, value, updated_at}`. */
export function decodeWindowValue(body: unknown): WindowValue {
  const o = object(body, "window");
  return {
    page: string(o.page, "page"),
    counter: string(o.counter, "counter"),
    seconds: integer(o.window_s, "window_s"),
    value: integer(o.value, "value"),
    updatedAt: integer(o.updated_at, "updated_at"),
  };
}

/** `active` and `connections` where the server sends them (it does since they exist). */
export function presenceFields(o: Record<string, unknown>): { active?: number; connections?: number } {
  return {
    ...(o.active !== undefined ? { active: integer(o.active, "active") } : {}),
    ...(o.connections !== undefined ? { connections: integer(o.connections, "connections") } : {}),
  };
}

/** `dcs` and `lag_ms` where the server sends them, as `dcs` and `lagMs`. */
function replicaFields(o: Json): { dcs?: readonly string[]; lagMs?: number } {
  let dcs: string[] | undefined;
  if (o.dcs !== undefined) {
    if (!Array.isArray(o.dcs)) throw bad("dcs is not an array");
    dcs = o.dcs.map((dc, i) => string(dc, `dcs[${i}]`));
  }
  return {
    ...(dcs !== undefined ? { dcs } : {}),
    ...(o.lag_ms !== undefined ? { lagMs: integer(o.lag_ms, "lag_ms") } : {}),
  };
}

/**
 * `GET /v1/pages/{page}/counter`: `{page, count, viewers, active, connections, counters, updated_at,
 * dcs, lag_ms}`.
 */
export function decodePageCounters(body: unknown): PageCounters {
  const o = object(body, "page counters");
  return {
    page: string(o.page, "page"),
    viewers: integer(o.viewers ?? o.count, "viewers"),
    ...presenceFields(o),
    counters: counterMap(o.counters),
    updatedAt: integer(o.updated_at, "updated_at"),
    ...replicaFields(o),
  };
}

/**
 * A change's answer: `{page, counter, value, updated_at}` (PUT, each batch item, reset).
 * `replayed` comes from the `Idempotent-Replayed` header or the item's own flag.
 */
export function decodeCounterValue(body: unknown, replayed: boolean): CounterValue {
  const o = object(body, "counter value");
  return {
    page: string(o.page, "page"),
    counter: string(o.counter, "counter"),
    value: integer(o.value, "value"),
    updatedAt: integer(o.updated_at, "updated_at"),
    replayed: replayed || o.duplicate === true,
  };
}

/** A reset's or delete's answer: `{page, counter, value: 0, previous, updated_at}`. */
export function decodeResetValue(body: unknown, replayed: boolean): ResetValue {
  const o = object(body, "reset answer");
  return { ...decodeCounterValue(o, replayed), previous: integer(o.previous, "previous") };
}

/** `{"results": [...]}` / `{"pages": [...]}`: the list under `key`. */
function listUnder(body: unknown, key: string): unknown[] {
  const list = object(body, "answer")[key];
  if (!Array.isArray(list)) throw bad(`answer has no ${key} list`);
  return list;
}

/**
 * `POST /v1/counters/increment`'s answer `{"results": [...]}`, one result per item in order:
 * `{page, counter, id, value, updated_at, duplicate}` or `{page, counter, id, error: {code, message}}`.
 */
export function decodeBatch(
  body: unknown,
  items: readonly ChangeItem[],
): Array<CounterValue | LivecountError> {
  const results = listUnder(body, "results");
  if (results.length !== items.length) throw bad(`${results.length} results for ${items.length} items`);
  return items.map((item, i) => {
    const o = object(results[i], "batch result");
    if (o.id !== undefined && o.id !== item.id) throw bad(`result ${i} is for another item`);
    if (isObject(o.error)) {
      const { code, message } = o.error;
      return errorFromCode(
        typeof code === "string" ? code : "http_error",
        typeof message === "string" ? message : "batch item failed",
        { page: item.page },
      );
    }
    return decodeCounterValue({ page: item.page, counter: item.counter, ...o }, false);
  });
}

/** `GET /v1/counters?page=a&page=b`: `{"pages": [<page counters>...]}`. */
export function decodeMany(body: unknown): PageCounters[] {
  return listUnder(body, "pages").map(decodePageCounters);
}

/** `GET /v1/counters?prefix=…`: `{"pages": [...], "cursor": "…" | null}`. */
export function decodeListing(body: unknown): PageListing {
  const cursor = object(body, "listing").cursor;
  return {
    pages: decodeMany(body),
    cursor: typeof cursor === "string" && cursor !== "" ? cursor : undefined,
  };
}

function rawEntries(v: unknown, what: string): Record<string, RawEntry> {
  const entries: Array<[string, RawEntry]> = [];
  for (const [dc, e] of Object.entries(object(v, what))) {
    const o = object(e, `${what}.${dc}`);
    entries.push([dc, { p: integer(o.p, `${what}.${dc}.p`), n: integer(o.n, `${what}.${dc}.n`) }]);
  }
  return Object.fromEntries(entries);
}

/**
 * `GET /v1/counters?page=…&raw=true`: `{"pages": [{page, viewers: {dc: {p, n}}, counters:
 * {counter: {dc: {p, n}}}, updated_at}]}`.
 */
export function decodeRaw(body: unknown): RawPage[] {
  return listUnder(body, "pages").map((v) => {
    const o = object(v, "page");
    const counters = Object.entries(object(o.counters, "counters")).map(
      ([name, e]): [string, Record<string, RawEntry>] => [name, rawEntries(e, `counters.${name}`)],
    );
    return {
      page: string(o.page, "page"),
      viewers: rawEntries(o.viewers ?? {}, "viewers"),
      counters: Object.fromEntries(counters),
      updatedAt: integer(o.updated_at, "updated_at"),
    };
  });
}
