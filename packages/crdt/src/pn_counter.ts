/**
 * A PN-counter: one `{p, n}` entry per replica (a data center). Only a replica's fenced owner
 * writes its entry, so `p` and `n` of an entry only ever grow; merge is the per-entry max and the
 * value is sum(p) - sum(n). Entries are keyed by replica id, so they never grow with the number of
 * nodes or restarts.
 */
export type ReplicaId = string;

export interface Entry {
  /** Sum of all increments made by the replica. Never decreases. */
  readonly p: number;
  /** Sum of all decrements made by the replica. Never decreases. */
  readonly n: number;
}

export type Entries = Readonly<Record<ReplicaId, Entry>>;

export const ZERO_ENTRY: Entry = Object.freeze({ p: 0, n: 0 });

export class InvalidEntryError extends Error {
  override name = "InvalidEntryError";
}

function assertAmount(by: number): void {
  if (!Number.isSafeInteger(by) || by < 0)
    throw new InvalidEntryError(`amount must be a non-negative safe integer, got ${by}`);
}

/** `total + by`, refusing to leave the safe integers: other replicas would reject such an entry. */
function grow(total: number, by: number): number {
  const next = total + by;
  if (!Number.isSafeInteger(next)) throw new InvalidEntryError(`entry would overflow: ${total} + ${by}`);
  return next;
}

/** True when `e` is a well-formed entry: two non-negative safe integers. */
export function isEntry(e: unknown): e is Entry {
  if (typeof e !== "object" || e === null) return false;
  const { p, n } = e as Record<string, unknown>;
  return Number.isSafeInteger(p) && Number.isSafeInteger(n) && (p as number) >= 0 && (n as number) >= 0;
}

/** Per-entry max: the join of two states of the same replica's entry. */
export function mergeEntry(a: Entry, b: Entry): Entry {
  if (b.p <= a.p && b.n <= a.n) return a;
  if (a.p <= b.p && a.n <= b.n) return b;
  return { p: Math.max(a.p, b.p), n: Math.max(a.n, b.n) };
}

/** True when `b` holds something `a` has not seen. */
export function entryAdvances(a: Entry | undefined, b: Entry): boolean {
  return a === undefined ? b.p > 0 || b.n > 0 : b.p > a.p || b.n > a.n;
}

export class PNCounter {
  readonly #entries = new Map<ReplicaId, Entry>();

  static from(entries: Entries): PNCounter {
    const c = new PNCounter();
    c.mergeAll(entries);
    return c;
  }

  increment(replica: ReplicaId, by = 1): Entry {
    assertAmount(by);
    const e = this.entry(replica);
    return this.#set(replica, { p: grow(e.p, by), n: e.n });
  }

  decrement(replica: ReplicaId, by = 1): Entry {
    assertAmount(by);
    const e = this.entry(replica);
    return this.#set(replica, { p: e.p, n: grow(e.n, by) });
  }

  /** Applies a signed change to the replica's own entry. */
  add(replica: ReplicaId, delta: number): Entry {
    return delta >= 0 ? this.increment(replica, delta) : this.decrement(replica, -delta);
  }

  /** Merges one replica's entry. Returns true when the state changed. Idempotent, commutative. */
  merge(replica: ReplicaId, entry: Entry): boolean {
    if (!isEntry(entry)) throw new InvalidEntryError(`malformed entry for ${replica}`);
    const mine = this.#entries.get(replica);
    if (!entryAdvances(mine, entry)) return false;
    // Always a fresh object: storing the caller's would let later mutation of it (or its extra
    // fields) leak into this state.
    const merged = mine === undefined ? entry : mergeEntry(mine, entry);
    this.#set(replica, { p: merged.p, n: merged.n });
    return true;
  }

  /** Merges every entry of another state. Returns true when anything changed. */
  mergeAll(entries: Entries): boolean {
    let changed = false;
    for (const [replica, entry] of Object.entries(entries)) changed = this.merge(replica, entry) || changed;
    return changed;
  }

  entry(replica: ReplicaId): Entry {
    return this.#entries.get(replica) ?? ZERO_ENTRY;
  }

  /** sum(p) - sum(n), over the replicas accepted by `include` (all by default). */
  value(include?: (replica: ReplicaId) => boolean): number {
    let v = 0;
    for (const [replica, e] of this.#entries) if (include === undefined || include(replica)) v += e.p - e.n;
    return v;
  }

  replicas(): IterableIterator<ReplicaId> {
    return this.#entries.keys();
  }

  /** A plain copy of every entry, the compact form that goes on the wire and into msgpack. */
  entries(): Record<ReplicaId, Entry> {
    return Object.fromEntries(this.#entries);
  }

  #set(replica: ReplicaId, e: Entry): Entry {
    this.#entries.set(replica, e);
    return e;
  }
}
