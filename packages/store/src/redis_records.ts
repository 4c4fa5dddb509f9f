/** How the Redis store reads entries, records and increment outcomes out of Redis replies. */
import type { Entry } from "@livecount/crdt";
import { StoreError, type IncrementOp, type IncrementOutcome, type PageRecord } from "./store.js";

export function parseEntry(value: unknown): Entry {
  const match = typeof value === "string" ? /^(\d+):(\d+)$/.exec(value) : null;
  if (match === null) throw new StoreError(`malformed entry in redis: ${String(value)}`);
  return { p: Number(match[1]), n: Number(match[2]) };
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
    case "duplicate":
      return { kind, payload: String(a) };
    case "conflict":
    case "stale":
      return { kind };
    default:
      throw new StoreError(`unexpected increment reply from redis: ${JSON.stringify(reply)}`);
  }
}

/** A page hash's fields (`{counter}\0{dc}` -> "p:n") as a record by counter and data center. */
export function pageRecord(fields: Readonly<Record<string, string>>): PageRecord {
  const byCounter = new Map<string, Array<[string, Entry]>>();
  for (const [field, value] of Object.entries(fields)) {
    const sep = field.indexOf("\u0000");
    if (sep < 0) throw new StoreError(`malformed entry field in redis: ${JSON.stringify(field)}`);
    const counter = field.slice(0, sep);
    let entries = byCounter.get(counter);
    if (entries === undefined) byCounter.set(counter, (entries = []));
    entries.push([field.slice(sep + 1), parseEntry(value)]);
  }
  // fromEntries defines own properties: a counter named "__proto__" stays a counter.
  return Object.fromEntries(
    [...byCounter].map(([counter, entries]) => [counter, Object.fromEntries(entries)]),
  );
}

export function entryField(counter: string, dc: string): string {
  return `${counter}\u0000${dc}`;
}
