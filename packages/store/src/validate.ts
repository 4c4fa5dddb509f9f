/**
 * Input checks shared by both stores, run before anything is applied so both reject the same
 * calls the same way, and the rules for liveness and listing they must agree on.
 */
import { isEntry } from "@livecount/crdt";
import { InvalidStoreInputError, type FencedWrites, type IncrementOp, type PageRecord } from "./store.js";

/** A lease or idempotency key with this expiry is still live at `now`. */
export function isLive(expiresAt: number, now: number): boolean {
  return now < expiresAt;
}

export function assertTtl(what: string, ms: number): void {
  if (!Number.isSafeInteger(ms) || ms <= 0) {
    throw new InvalidStoreInputError(`${what} must be a positive integer of ms, got ${ms}`);
  }
}

export function assertWrites(groups: readonly FencedWrites[]): void {
  for (const { writes } of groups) {
    for (const w of writes) {
      if (!isEntry(w.entry)) {
        throw new InvalidStoreInputError(`malformed entry for ${w.page}/${w.counter}/${w.dc}`);
      }
    }
  }
}

/** `assertWrites` for the records of `mergePages`. */
export function assertRecords(pages: ReadonlyMap<string, PageRecord>): void {
  for (const [page, record] of pages) {
    for (const [counter, entries] of Object.entries(record)) {
      for (const [dc, entry] of Object.entries(entries)) {
        if (!isEntry(entry)) throw new InvalidStoreInputError(`malformed entry for ${page}/${counter}/${dc}`);
      }
    }
  }
}

export function assertIncrements(ops: readonly IncrementOp[]): void {
  for (const op of ops) {
    if (!Number.isSafeInteger(op.delta)) {
      throw new InvalidStoreInputError(`delta must be a safe integer, got ${op.delta} for ${op.page}`);
    }
    if (op.fingerprint !== undefined && (typeof op.fingerprint !== "string" || op.fingerprint === "")) {
      throw new InvalidStoreInputError(`fingerprint must be a non-empty string for ${op.page}`);
    }
    if (op.startAt !== undefined && (!Number.isSafeInteger(op.startAt) || op.startAt < 0)) {
      throw new InvalidStoreInputError(
        `startAt must be a non-negative safe integer, got ${op.startAt} for ${op.page}`,
      );
    }
    const counters = new Set([op.counter]);
    for (const change of op.also ?? []) {
      if (!Number.isSafeInteger(change.delta)) {
        throw new InvalidStoreInputError(`delta must be a safe integer, got ${change.delta} for ${op.page}`);
      }
      if (counters.has(change.counter)) {
        throw new InvalidStoreInputError(`counter ${change.counter} changes twice in one op for ${op.page}`);
      }
      counters.add(change.counter);
    }
  }
}

export function assertLimit(limit: number): void {
  if (!Number.isSafeInteger(limit) || limit < 1) {
    throw new InvalidStoreInputError(`limit must be a positive integer, got ${limit}`);
  }
}

/**
 * Where a listing resumes: after the cursor (the last id already returned), but never before the
 * prefix, so a cursor from another prefix cannot leak ids outside it.
 */
export function listStart(prefix: string, cursor: string | undefined): { from: string; exclusive: boolean } {
  return cursor !== undefined && cursor >= prefix
    ? { from: cursor, exclusive: true }
    : { from: prefix, exclusive: false };
}
