/**
 * A page's time buckets on its owner (protocol windows.ts and series.ts): window buckets other DCs
 * send, this DC's unique-visitor registers and peaks. They are written through to the store with the
 * page's next flush and never held: a page may have thousands, which only reads need, and reads go
 * to the store. This DC's are published once durable, like its other entries.
 */
import { HLL_REGISTERS, mergeEntry, type Entry } from "@livecount/crdt";
import {
  dayOf,
  hourOf,
  isSeriesCounter,
  minuteOf,
  peakHourOf,
  peakMinuteOf,
  uniqueRegisterOf,
} from "@livecount/protocol";
import type { EntryWrite } from "@livecount/store";
import type { VisitorHash } from "./visitor_hash.js";

/** Ranks kept in a Map up to this many registers, in an array of every register beyond (4 KB). */
const SPARSE_RANKS = 256;

type Ranks = Map<number, number> | Uint8Array;

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
  /** Entries to write, by "counter\0dc": a later copy of the same entry merges into the queued one. */
  #writes = new Map<string, EntryWrite>();
  /** This DC's entries among #writes, to publish once written. */
  #publish = new Map<string, Entry>();
  /** Those taken with the writes of the flush in progress. */
  #taken = new Map<string, Entry>();
  /** Today's registers as this owner raised them: an arrival that raises none writes nothing. */
  #visitors: { day: number; ranks: Ranks } | undefined;
  #peak: PeakState | undefined;

  /** `hash`: keyed by LIVECOUNT_VISITOR_KEY, the same in every DC (registers merge across DCs). */
  constructor(page: string, dc: string, hash: VisitorHash) {
    this.#page = page;
    this.#dc = dc;
    this.#hash = hash;
  }

  /** Another DC's time bucket entry, received here: to persist. */
  remote(counter: string, dc: string, entry: Entry): void {
    this.#queue({ page: this.#page, counter, dc, entry });
  }

  /** Queues a write, merged (max) with one of the same entry already queued: the queue stays bounded. */
  #queue(write: EntryWrite): void {
    const id = `${write.counter}\u0000${write.dc}`;
    const queued = this.#writes.get(id)?.entry;
    const entry = queued === undefined ? write.entry : mergeEntry(queued, write.entry);
    this.#writes.set(id, { ...write, entry });
  }

  /**
   * Arrived viewers are visitors of the day; on a new day (or in a new actor, or after the store
   * removed the page) so is everyone `present`. True when something is to write.
   */
  visitors(arrived: readonly string[], present: () => Iterable<string>, now: number): boolean {
    const all = this.#visitors?.day !== dayOf(now) ? [...present(), ...arrived] : arrived;
    let raised = false;
    for (const viewer of all) raised = this.#visitor(viewer, now) || raised;
    return raised;
  }

  /** A viewer started counting here: its register of today may rise. True when something is to write. */
  #visitor(viewer: string, now: number): boolean {
    const day = dayOf(now);
    if (this.#visitors?.day !== day) this.#visitors = { day, ranks: new Map() };
    const { index, rank } = this.#hash.register(viewer);
    const ranks = this.#visitors.ranks;
    if ((ranks instanceof Map ? (ranks.get(index) ?? 0) : ranks[index]!) >= rank) return false;
    if (ranks instanceof Map) {
      ranks.set(index, rank);
      if (ranks.size > SPARSE_RANKS) this.#visitors.ranks = dense(ranks);
    } else ranks[index] = rank;
    this.#own(uniqueRegisterOf(day, index), rank);
    return true;
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
      this.#own(peakMinuteOf(minute), most);
      raised = true;
    }
    if (most > p.hourMax) {
      p.hourMax = most;
      this.#own(peakHourOf(hour), most);
      raised = true;
    }
    return raised;
  }

  #own(counter: string, p: number): void {
    const entry = { p, n: 0 };
    this.#queue({ page: this.#page, counter, dc: this.#dc, entry });
    this.#publish.set(counter, entry);
  }

  /** The entries to write with this flush; this DC's are published once it succeeds (`takePublished`). */
  take(): EntryWrite[] {
    const writes = [...this.#writes.values()];
    this.#writes = new Map();
    this.#taken = this.#publish;
    this.#publish = new Map();
    return writes;
  }

  /** Adds this DC's entries taken with the last `take()` to its update (durable once it is published). */
  publishInto(updates: Map<string, Record<string, Entry>>): void {
    if (this.#taken.size === 0) return;
    const own = updates.get(this.#dc) ?? {};
    for (const [name, entry] of this.#taken) own[name] = entry;
    updates.set(this.#dc, own);
    this.#taken = new Map();
  }

  /** A flush failed: its time bucket entries are written (and this DC's published) with the next. */
  restore(writes: readonly EntryWrite[]): void {
    for (const w of writes) {
      if (!isSeriesCounter(w.counter)) continue;
      this.#queue(w);
      const queued = this.#publish.get(w.counter);
      if (w.dc === this.#dc && (queued === undefined || queued.p < w.entry.p))
        this.#publish.set(w.counter, w.entry);
    }
  }

  /**
   * The store removed the page (it was empty for the TTL): today's registers and the peaks noted
   * here are gone there, so the next visitors and viewers write them again.
   */
  forget(): void {
    this.#visitors = undefined;
    this.#peak = undefined;
  }

  get pending(): boolean {
    return this.#writes.size > 0 || this.#publish.size > 0;
  }
}

function dense(ranks: ReadonlyMap<number, number>): Uint8Array {
  const all = new Uint8Array(HLL_REGISTERS);
  for (const [index, rank] of ranks) all[index] = rank;
  return all;
}
