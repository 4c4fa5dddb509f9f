/** How the Redis store reads entries, records and increment outcomes out of Redis replies. */
import type { Entry } from "@livecount/crdt";
import type { RedisConnection } from "./redis_connection.js";
import {
  StoreError,
  type EntryRef,
  type IncrementOp,
  type IncrementOutcome,
  type PageRecord,
} from "./store.js";
import { addToRecord } from "./page_merge.js";

const ENTRY_VALUE = /^\d+:\d+$/;

export function parseEntry(value: unknown): Entry {
  if (typeof value !== "string" || !ENTRY_VALUE.test(value))
    throw new StoreError(`malformed entry in redis: ${String(value)}`);
  const colon = value.indexOf(":");
  return { p: Number(value.slice(0, colon)), n: Number(value.slice(colon + 1)) };
}

export function parseOutcome(reply: unknown, op: IncrementOp): IncrementOutcome {
  const [kind, a, b, ...rest] = Array.isArray(reply) ? (reply as unknown[]) : [];
  switch (kind) {
    case "applied": {
      const entry = { p: Number(a), n: Number(b) };
      if (op.also === undefined) return { kind, entry };
      const also = op.also.map((_, i) => ({ p: Number(rest[2 * i]), n: Number(rest[2 * i + 1]) }));
      return { kind, entry, also };
    }
    case "duplicate": {
      // The entries now ("p:n", "" where absent): the op's, then those of its `also`.
      const now = [b, ...rest].map((v) => (typeof v === "string" && v !== "" ? parseEntry(v) : undefined));
      const entry = now[0];
      return {
        kind,
        payload: String(a),
        ...(entry !== undefined ? { entry } : {}),
        ...(op.also !== undefined ? { also: op.also.map((_, i) => now[i + 1]) } : {}),
      };
    }
    case "conflict":
    case "stale":
    case "too_large":
      return { kind };
    default:
      throw new StoreError(`unexpected increment reply from redis: ${JSON.stringify(reply)}`);
  }
}

/**
 * A page hash's fields (`{counter}\0{dc}` -> "p:n") as a record by counter and data center: from
 * HGETALL's object, or from the flat field, value, field, value... list a script returns.
 */
export function pageRecord(fields: Readonly<Record<string, string>> | readonly unknown[]): PageRecord {
  const record: PageRecord = {};
  if (!Array.isArray(fields)) {
    for (const [field, value] of Object.entries(fields)) addField(record, field, value);
    return record;
  }
  if (fields.length % 2 !== 0) throw new StoreError("malformed page reply from redis: odd field list");
  for (let i = 0; i < fields.length; i += 2) addField(record, fields[i], fields[i + 1]);
  return record;
}

function addField(record: PageRecord, field: unknown, value: unknown): void {
  const sep = typeof field === "string" ? field.indexOf("\u0000") : -1;
  if (sep < 0) throw new StoreError(`malformed entry field in redis: ${JSON.stringify(field)}`);
  const name = field as string;
  addToRecord(record, name.slice(0, sep), name.slice(sep + 1), parseEntry(value));
}

/** The counter and data center of an entry's field in a page hash. */
export function splitEntryField(field: string): { counter: string; dc: string } {
  const sep = field.indexOf("\u0000");
  if (sep < 0) throw new StoreError(`malformed entry field in redis: ${JSON.stringify(field)}`);
  return { counter: field.slice(0, sep), dc: field.slice(sep + 1) };
}

export function entryField(counter: string, dc: string): string {
  return `${counter}\u0000${dc}`;
}

/** The entries of a partition's index of non-zero indexed entries (`page NUL counter NUL dc`). */
export async function readNonZero(conn: RedisConnection, key: string): Promise<EntryRef[]> {
  const members = await conn.client.smembers(key).catch((cause: unknown) => {
    throw new StoreError("redis nonZeroEntries failed", { cause });
  });
  return members.flatMap((member) => {
    // Page ids, counter names and DC ids never hold NUL, so the split is unambiguous.
    const [page, counter, dc] = member.split("\u0000");
    return page !== undefined && counter !== undefined && dc !== undefined ? [{ page, counter, dc }] : [];
  });
}
