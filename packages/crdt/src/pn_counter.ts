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

/** No entries yet: shared by every empty counter, never written (a replica's first entry copies it). */
const NO_SLOTS: ReadonlyArray<ReplicaId | Entry> = Object.freeze([]);

export class PNCounter {
  /**
   * Replica id and entry, alternating, one pair per replica. A counter holds one to a few replicas
   * (data centers), and processes hold one per counter of every page they watch or own: a flat array
   * sized to its pairs costs a third of a Map with its hash table, and a scan of a few ids is as fast
   * as a lookup. A new replica copies the array (once per data center); an entry is replaced in place.
   */
  #slots: ReadonlyArray<ReplicaId | Entry> = NO_SLOTS;

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
    const at = this.#indexOf(replica);
    const mine = at < 0 ? undefined : (this.#slots[at + 1] as Entry);
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
    const at = this.#indexOf(replica);
    return at < 0 ? ZERO_ENTRY : (this.#slots[at + 1] as Entry);
  }

  /** sum(p) - sum(n), over the replicas accepted by `include` (all by default). */
  value(include?: (replica: ReplicaId) => boolean): number {
    const slots = this.#slots;
    let v = 0;
    for (let i = 0; i < slots.length; i += 2) {
      if (include !== undefined && !include(slots[i] as ReplicaId)) continue;
      const e = slots[i + 1] as Entry;
      v += e.p - e.n;
    }
    return v;
  }

  *replicas(): IterableIterator<ReplicaId> {
    const slots = this.#slots;
    for (let i = 0; i < slots.length; i += 2) yield slots[i] as ReplicaId;
  }

  /** A plain copy of every entry, the compact form that goes on the wire and into msgpack. */
  entries(): Record<ReplicaId, Entry> {
    const out: Record<ReplicaId, Entry> = {};
    const slots = this.#slots;
    for (let i = 0; i < slots.length; i += 2) {
      const replica = slots[i] as ReplicaId;
      const e = slots[i + 1] as Entry;
      // An own property even for a replica named "__proto__" (an assignment would set the prototype).
      if (replica === "__proto__")
        Object.defineProperty(out, replica, {
          value: e,
          enumerable: true,
          writable: true,
          configurable: true,
        });
      else out[replica] = e;
    }
    return out;
  }

  #indexOf(replica: ReplicaId): number {
    const slots = this.#slots;
    for (let i = 0; i < slots.length; i += 2) if (slots[i] === replica) return i;
    return -1;
  }

  #set(replica: ReplicaId, e: Entry): Entry {
    const at = this.#indexOf(replica);
    // concat sizes the copy to its pairs (a spread would leave room to grow: three times the bytes).
    if (at < 0) this.#slots = this.#slots.concat(replica, e);
    else (this.#slots as Array<ReplicaId | Entry>)[at + 1] = e;
    return e;
  }
}
