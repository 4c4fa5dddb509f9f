/**
 * The memory store's idempotency records (Store.increment): one per page and key, live until its
 * `expiresAt`, dropped in amortised sweeps so memory stays within twice the live keys.
 */
import type { Entry } from "@livecount/crdt";
import type { IncrementOp, IncrementOutcome, KeyRestore } from "./store.js";
import { isLive } from "./validate.js";

export interface KeyRecord {
  readonly counter: string;
  readonly delta: number;
  readonly fingerprint: string | undefined;
  readonly payload: string;
  readonly expiresAt: number;
}

/** The record of a change under its key. */
export function keyRecord(
  change: { readonly counter: string; readonly delta: number; readonly fingerprint?: string | undefined },
  payload: string,
  expiresAt: number,
): KeyRecord {
  const { counter, delta, fingerprint } = change;
  return { counter, delta, fingerprint, payload, expiresAt };
}

/** Whether `change` is the one `seen` recorded: a retry of it (Store.increment's duplicate rule). */
export function sameChange(
  seen: KeyRecord,
  change: { readonly counter: string; readonly delta: number; readonly fingerprint?: string | undefined },
): boolean {
  return change.fingerprint !== undefined
    ? seen.fingerprint === change.fingerprint
    : seen.fingerprint === undefined && seen.counter === change.counter && seen.delta === change.delta;
}

/** Store.increment's outcome for an op whose key holds `seen`: its replay, or a conflict. */
export function answerSeen(
  seen: KeyRecord,
  op: IncrementOp,
  held: ReadonlyArray<Entry | undefined>,
): IncrementOutcome {
  if (!sameChange(seen, op)) return { kind: "conflict" };
  const [entry, ...also] = held;
  return {
    kind: "duplicate",
    payload: seen.payload,
    ...(entry !== undefined ? { entry } : {}),
    ...(op.also !== undefined ? { also } : {}),
  };
}

/** Sweeps are not worth running below this many remembered keys. */
const MIN_KEYS_BEFORE_SWEEP = 1024;
/** Sweeps at least this often (store time) while increments arrive, so idle keys do not linger. */
const SWEEP_INTERVAL_MS = 60_000;

export class MemoryKeys {
  /** By `${page}\0${key}`; page ids are printable ASCII, so never ambiguous. */
  readonly #keys = new Map<string, KeyRecord>();
  #sweepAtSize = MIN_KEYS_BEFORE_SWEEP;
  #lastSweep: number;

  constructor(now: number) {
    this.#lastSweep = now;
  }

  /** Keys remembered, expired ones not yet swept included. */
  get size(): number {
    return this.#keys.size;
  }

  /** The page's record of `key`, while it is live. */
  live(page: string, key: string, now: number): KeyRecord | undefined {
    const record = this.#keys.get(`${page}\u0000${key}`);
    return record !== undefined && isLive(record.expiresAt, now) ? record : undefined;
  }

  set(page: string, key: string, record: KeyRecord): void {
    this.#keys.set(`${page}\u0000${key}`, record);
  }

  /**
   * Store.restoreKeys and importKeys: each record live for `ttlMs` from `now`; with `keepLive`, not
   * over a live one. Returns how many it wrote.
   */
  restore(records: readonly KeyRestore[], now: number, ttlMs: number, keepLive: boolean): number {
    let written = 0;
    for (const r of records) {
      if (keepLive && this.live(r.page, r.key, now) !== undefined) continue;
      this.set(r.page, r.key, keyRecord(r, r.payload, now + ttlMs));
      written++;
    }
    return written;
  }

  /**
   * Drops expired keys, amortised: a full pass runs only once the map doubled since the last pass
   * (or a sweep interval passed), so each increment pays O(1) on average.
   */
  maybeSweep(now: number): void {
    if (this.#keys.size < this.#sweepAtSize && now - this.#lastSweep < SWEEP_INTERVAL_MS) return;
    for (const [id, record] of this.#keys) if (!isLive(record.expiresAt, now)) this.#keys.delete(id);
    this.#sweepAtSize = Math.max(MIN_KEYS_BEFORE_SWEEP, 2 * this.#keys.size);
    this.#lastSweep = now;
  }
}
