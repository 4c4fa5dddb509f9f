/**
 * A page's time buckets on its owner (protocol windows.ts and series.ts): window buckets other DCs
 * send, this DC's unique-visitor registers and peaks. They are written through to the store with the
 * page's next flush and never held: a page may have thousands, which only reads need, and reads go
 * to the store. This DC's are published once durable, like its other entries.
 */
import { HLL_REGISTERS, registerOf, type Entry } from "@livecount/crdt";
import {
  dayOf,
  hourOf,
  isSeriesCounter,
  minuteOf,
  peakHourOf,
  peakMinuteOf,
  uniqueRegisterOf,
} from "@livecount/protocol";
import { murmur3 } from "@livecount/ring";
import type { EntryWrite } from "@livecount/store";

/** Seeds of the two independent hashes of a viewer key (register and rank). */
const INDEX_SEED = 0x3c6ef372;
const RANK_SEED = 0x5851f42d;
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
  #writes: EntryWrite[] = [];
  /** This DC's entries among #writes, to publish once written. */
  #publish = new Map<string, Entry>();
  /** Those taken with the writes of the flush in progress. */
  #taken = new Map<string, Entry>();
  /** Today's registers as this owner raised them: an arrival that raises none writes nothing. */
  #visitors: { day: number; ranks: Ranks } | undefined;
  #peak: PeakState | undefined;

  constructor(page: string, dc: string) {
    this.#page = page;
    this.#dc = dc;
  }

  /** Another DC's time bucket entry, received here: to persist. */
  remote(counter: string, dc: string, entry: Entry): void {
    this.#writes.push({ page: this.#page, counter, dc, entry });
  }

  /** Whether no visitor was registered today yet (a new day, or a new actor). */
  newDay(now: number): boolean {
    return this.#visitors?.day !== dayOf(now);
  }

  /** A viewer started counting here: its register of today may rise. True when something is to write. */
  visitor(viewer: string, now: number): boolean {
    const day = dayOf(now);
    if (this.#visitors?.day !== day) this.#visitors = { day, ranks: new Map() };
    const { index, rank } = visitorRegister(viewer);
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
    this.#writes.push({ page: this.#page, counter, dc: this.#dc, entry });
    this.#publish.set(counter, entry);
  }

  /** The entries to write with this flush; this DC's are published once it succeeds (`takePublished`). */
  take(): EntryWrite[] {
    const writes = this.#writes;
    this.#writes = [];
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
      this.#writes.push(w);
      const queued = this.#publish.get(w.counter);
      if (w.dc === this.#dc && (queued === undefined || queued.p < w.entry.p))
        this.#publish.set(w.counter, w.entry);
    }
  }

  get pending(): boolean {
    return this.#writes.length > 0 || this.#publish.size > 0;
  }
}

/** The HyperLogLog register a viewer key falls in, and its rank there. */
export function visitorRegister(viewer: string): { index: number; rank: number } {
  return registerOf(murmur3(viewer, INDEX_SEED), murmur3(viewer, RANK_SEED));
}

function dense(ranks: ReadonlyMap<number, number>): Uint8Array {
  const all = new Uint8Array(HLL_REGISTERS);
  for (const [index, rank] of ranks) all[index] = rank;
  return all;
}
