/**
 * A page's time buckets on its owner (protocol windows.ts and series.ts): window buckets other DCs
 * send, this DC's unique-visitor registers and peaks. They are written through to the store with the
 * page's next flush and never held: a page may have thousands, which only reads need, and reads go
 * to the store. This DC's are published once durable, like its other entries.
 */
import { HLL_REGISTERS, mergeEntry, type Entry } from "@livecount/crdt";
import {
  UNIQUE_PREFIX,
  dayOf,
  hourOf,
  isSeriesCounter,
  minuteOf,
  peakHourOf,
  peakMinuteOf,
  uniqueRegisterOf,
} from "@livecount/protocol";
import type { EntryWrite } from "@livecount/store";
import { RANK_BITS, RANK_MASK, type VisitorHash } from "./visitor_hash.js";

/**
 * Registers kept sparse up to this many (a sorted array of numbers, about 11 bytes a register against
 * some 28 for a Map's entry), in an array of every register beyond (4 KB).
 */
const SPARSE_RANKS = 256;

/**
 * Today's registers as bytes: the rank, and RAISED while the register waits for a flush to name it.
 * Sparse: `index << BYTE_BITS | byte` by index, ascending. Dense: the byte at each index.
 */
type Ranks = number[] | Uint8Array;
const BYTE_BITS = 8;
/** A register's rank within its byte: ranks go up to HLL_MAX_RANK (33). */
const RANK_OF = 0x7f;
const RAISED = 0x80;

/** The most viewers shown in the current minute and hour, and the value shown last. */
interface PeakState {
  minute: number;
  minuteMax: number;
  hour: number;
  hourMax: number;
  last: number;
}

export class PageSeries {
  readonly #page: string;
  readonly #dc: string;
  readonly #hash: VisitorHash;
  // The maps below are made when something goes in and dropped when taken: an owner holds a
  // PageSeries per resident page, most with nothing queued, and an empty Map costs 184 bytes.
  /** Other DCs' entries to write, by "counter\0dc": a later copy of the same entry merges into the queued one. */
  #remote: Map<string, EntryWrite> | undefined;
  /**
   * This DC's entries to write and then publish, by counter, as their `p` (their `n` is 0): a raise
   * is a number in a map until the flush takes it, however often the entry rises before.
   */
  #own: Map<string, number> | undefined;
  /**
   * Unique-visitor registers waiting for a flush with room for them (a flush takes them last, up to
   * what its other entries leave of its bound: durable_writer.ts): other DCs' as `#remote` holds
   * entries, this DC's named ones (of a past day, or given back by a failed flush) as `#own` does.
   * Today's not yet named wait in `#visitors.raised`.
   */
  #remoteRegisters: Map<string, EntryWrite> | undefined;
  #ownRegisters: Map<string, number> | undefined;
  /** This DC's entries taken with the writes of the flush in progress. */
  #taken: Map<string, Entry> | undefined;
  /**
   * Today's registers as this owner raised them: an arrival that raises none writes nothing.
   * `raised`: the indexes raised and not yet named, each once, named with their rank then. Numbers in arrays, not Maps: this runs for every arriving viewer.
   */
  #visitors: { day: number; ranks: Ranks; raised: number[] } | undefined;
  #peak: PeakState | undefined;

  /** `hash`: keyed by LIVECOUNT_VISITOR_KEY, the same in every DC (registers merge across DCs). */
  constructor(page: string, dc: string, hash: VisitorHash) {
    this.#page = page;
    this.#dc = dc;
    this.#hash = hash;
  }

  /** Another DC's time bucket entry, received here: to persist. */
  remote(counter: string, dc: string, entry: Entry): void {
    const id = `${counter}\u0000${dc}`;
    const remote = counter.startsWith(UNIQUE_PREFIX)
      ? (this.#remoteRegisters ??= new Map())
      : (this.#remote ??= new Map());
    const queued = remote.get(id)?.entry;
    const merged = queued === undefined ? entry : mergeEntry(queued, entry);
    remote.set(id, { page: this.#page, counter, dc, entry: merged });
  }

  /**
   * An arrived viewer (if any) is a visitor of the day; on a new day (or in a new actor, or after the
   * store removed the page) so is everyone `present`. True when something is to write.
   */
  visitor(arrived: string | undefined, present: { viewers(): Iterable<string> }, now: number): boolean {
    const day = dayOf(now);
    let raised = false;
    if (this.#visitors?.day !== day) {
      this.#nameRegisters();
      this.#visitors = { day, ranks: [], raised: [] };
      for (const viewer of present.viewers()) raised = this.#visitor(viewer) || raised;
    }
    return (arrived !== undefined && this.#visitor(arrived)) || raised;
  }

  /**
   * A viewer started counting here: its register of today may rise. True when something is to
   * write. A raised register is a number in `raised` until the flush (or the next day) names it.
   */
  #visitor(viewer: string): boolean {
    const visitors = this.#visitors!;
    const register = this.#hash.register(viewer);
    const index = register >>> RANK_BITS;
    const rank = register & RANK_MASK;
    const ranks = visitors.ranks;
    const byte = byteAt(ranks, index);
    if ((byte & RANK_OF) >= rank) return false;
    setByte(ranks, index, rank | RAISED);
    // Once per register until a flush names it.
    if ((byte & RAISED) === 0) visitors.raised.push(index);
    if (!(ranks instanceof Uint8Array) && ranks.length > SPARSE_RANKS) visitors.ranks = dense(ranks);
    return true;
  }

  /**
   * Registers raised since the last flush become entries to write (`#ownRegisters`), by name, at
   * their rank now: the first `limit` raised, the rest left raised.
   */
  #nameRegisters(limit = Infinity): void {
    const visitors = this.#visitors;
    if (visitors === undefined || visitors.raised.length === 0 || limit <= 0) return;
    const { day, ranks, raised } = visitors;
    const named = Math.min(limit, raised.length);
    const own = (this.#ownRegisters ??= new Map());
    for (let i = 0; i < named; i++) {
      const index = raised[i]!;
      const rank = byteAt(ranks, index) & RANK_OF;
      raiseIn(own, uniqueRegisterOf(day, index), rank);
      setByte(ranks, index, rank);
    }
    if (named === raised.length) raised.length = 0;
    else raised.splice(0, named);
  }

  /**
   * The page's viewers as this DC shows them now. A minute's (and an hour's) peak is the most shown
   * in it: the value it started with, carried from before, and every value shown during it. True
   * when something is to write.
   */
  viewers(viewers: number, now: number): boolean {
    const minute = minuteOf(now);
    const hour = hourOf(now);
    const p = (this.#peak ??= { minute, minuteMax: 0, hour, hourMax: 0, last: viewers });
    if (p.minute !== minute) Object.assign(p, { minute, minuteMax: 0 });
    if (p.hour !== hour) Object.assign(p, { hour, hourMax: 0 });
    const most = Math.max(viewers, p.last);
    p.last = viewers;
    let raised = false;
    if (most > p.minuteMax) {
      p.minuteMax = most;
      this.#raise(peakMinuteOf(minute), most);
      raised = true;
    }
    if (most > p.hourMax) {
      p.hourMax = most;
      this.#raise(peakHourOf(hour), most);
      raised = true;
    }
    return raised;
  }

  /** This DC's entry of `counter` rises to `p` (its `n` stays 0). */
  #raise(counter: string, p: number): void {
    raiseIn((this.#own ??= new Map()), counter, p);
  }

  /**
   * Adds the entries to write with this flush to `writes`, with at most `registers` of the
   * unique-visitor registers waiting (`registersWaiting`: other DCs', then this DC's named, then
   * today's raised; the others wait for a later flush); this DC's are published once it succeeds
   * (`publishInto`).
   */
  take(writes: EntryWrite[], registers = Infinity): void {
    if (this.#remote !== undefined) {
      for (const write of this.#remote.values()) writes.push(write);
      this.#remote = undefined;
    }
    let left = registers;
    const remoteRegisters = this.#remoteRegisters;
    if (remoteRegisters !== undefined && left > 0) {
      for (const [id, write] of remoteRegisters) {
        if (left === 0) break;
        writes.push(write);
        remoteRegisters.delete(id);
        left--;
      }
      if (remoteRegisters.size === 0) this.#remoteRegisters = undefined;
    }
    this.#nameRegisters(left - (this.#ownRegisters?.size ?? 0));
    const taken = new Map<string, Entry>();
    for (const [counter, p] of this.#own ?? []) taken.set(counter, { p, n: 0 });
    this.#own = undefined;
    const ownRegisters = this.#ownRegisters;
    if (ownRegisters !== undefined && left > 0) {
      for (const [counter, p] of ownRegisters) {
        if (left === 0) break;
        taken.set(counter, { p, n: 0 });
        ownRegisters.delete(counter);
        left--;
      }
      if (ownRegisters.size === 0) this.#ownRegisters = undefined;
    }
    for (const [counter, entry] of taken) writes.push({ page: this.#page, counter, dc: this.#dc, entry });
    this.#taken = taken.size > 0 ? taken : undefined;
  }

  /** Adds this DC's entries taken with the last `take()` to its update (durable once it is published). */
  publishInto(updates: Map<string, Map<string, Entry>>): void {
    if (this.#taken === undefined) return;
    const own = updates.get(this.#dc) ?? new Map<string, Entry>();
    for (const [name, entry] of this.#taken) own.set(name, entry);
    updates.set(this.#dc, own);
    this.#taken = undefined;
  }

  /**
   * A flush failed: its time bucket entries are written (and this DC's published) with the next, its
   * registers when a flush has room for them.
   */
  restore(writes: readonly EntryWrite[]): void {
    for (const w of writes) {
      if (!isSeriesCounter(w.counter)) continue;
      if (w.dc !== this.#dc) this.remote(w.counter, w.dc, w.entry);
      else if (w.counter.startsWith(UNIQUE_PREFIX))
        raiseIn((this.#ownRegisters ??= new Map()), w.counter, w.entry.p);
      else this.#raise(w.counter, w.entry.p);
    }
  }

  /**
   * The store removed the page (it was empty for the TTL): today's registers and the peaks noted
   * here are gone there, so the next visitors and viewers write them again.
   */
  forget(): void {
    this.#nameRegisters(); // raised since the last flush: still to write
    this.#visitors = undefined;
    this.#peak = undefined;
  }

  /**
   * Entries the next `take` adds, given room. A register named (by `forget`, a day change or a failed
   * flush's `restore`) and raised again before a flush writes it counts twice until then: it merges
   * into one entry, and a flush's bound may go a register short.
   */
  get pendingCount(): number {
    return (this.#remote?.size ?? 0) + (this.#own?.size ?? 0) + this.registersWaiting;
  }

  /**
   * Unique-visitor registers waiting for a flush, this DC's and others': while every new visitor
   * raises one, one write each, which a flush at its bound leaves for later (durable_writer.ts).
   */
  get registersWaiting(): number {
    return (
      (this.#remoteRegisters?.size ?? 0) +
      (this.#ownRegisters?.size ?? 0) +
      (this.#visitors?.raised.length ?? 0)
    );
  }
}

/** Where `index` is in sparse ranks, or where it would go (`~position`) when absent. */
function findSparse(ranks: readonly number[], index: number): number {
  let lo = 0;
  let hi = ranks.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const at = ranks[mid]! >>> BYTE_BITS;
    if (at === index) return mid;
    if (at < index) lo = mid + 1;
    else hi = mid - 1;
  }
  return ~lo;
}

/** The byte of the register at `index`; 0 when it was never raised today. */
function byteAt(ranks: Ranks, index: number): number {
  if (ranks instanceof Uint8Array) return ranks[index]!;
  const found = findSparse(ranks, index);
  return found < 0 ? 0 : ranks[found]! & 0xff;
}

function setByte(ranks: Ranks, index: number, byte: number): void {
  if (ranks instanceof Uint8Array) {
    ranks[index] = byte;
    return;
  }
  const found = findSparse(ranks, index);
  const packed = (index << BYTE_BITS) | byte;
  if (found >= 0) {
    ranks[found] = packed;
    return;
  }
  const at = ~found;
  ranks.push(packed);
  for (let i = ranks.length - 1; i > at; i--) ranks[i] = ranks[i - 1]!;
  ranks[at] = packed;
}

function dense(ranks: readonly number[]): Uint8Array {
  const all = new Uint8Array(HLL_REGISTERS);
  for (const packed of ranks) all[packed >>> BYTE_BITS] = packed & 0xff;
  return all;
}

/** `counter`'s queued value in `queue` rises to `p`. */
function raiseIn(queue: Map<string, number>, counter: string, p: number): void {
  const queued = queue.get(counter);
  if (queued === undefined || queued < p) queue.set(counter, p);
}
