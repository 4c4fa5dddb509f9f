/**
 * Digests for anti-entropy between data centers: what a partition holds, summed up so two DCs can
 * tell cheaply whether they hold the same entries, and where they differ.
 *
 * Each stored entry (page, counter, DC, {p, n}) hashes to 64 bits: the first 16 hex digits of the
 * SHA-1 of `page\0counter\0dc\0p:n` (Redis computes the same with `redis.sha1hex`). A presence
 * entry at zero (p == n) counts as nothing: it says no more than its absence does, since an owner
 * starts a page's own presence entry above every value it ever held (see `presenceFloor`), so two
 * DCs need not agree on it, and a page removed when empty leaves the digests as they were. A bucket's
 * digest is the XOR of its entries' hashes, and a partition's digest the XOR of its buckets'. XOR
 * makes a digest independent of the order entries were written in, and lets a store keep it current
 * as entries change: a changed entry XORs out its old hash and XORs in its new one. Two DCs holding
 * the same entries hold the same digests; a differing bucket pinpoints which pages to transfer.
 *
 * A settled delete counts as nothing too: a deleted counter a purge may remove (`purgeableAt`: one
 * entry `{z, z}`, the tombstone's activity exactly `2z`), its entry and its tombstone's. It says no
 * more than its absence: a DC that purged it and a DC that did not yet hold the same digests, so
 * anti-entropy neither sends it back nor sees a difference that never goes away. A store keeps this
 * current by XORing the counter's and its tombstone's entries out when a change settles the delete,
 * and in again when one unsettles it (`pageDigest` is the definition; the Redis store applies it to
 * pages in its tombstone index, which every tombstone written since this rule existed puts there).
 *
 * Pages spread over a partition's buckets by a hash of the page id (`bucketOf`), the same in every
 * process. A digest is 16 lowercase hex digits, two 32-bit lanes (Lua's `bit` library works on 32
 * bits).
 */
import { createHash } from "node:crypto";
import type { Entry } from "@livecount/crdt";
import { murmur3 } from "@livecount/ring";

/** Buckets per partition: a differing bucket costs the transfer of its pages, so about 1/64 of a partition. */
export const DIGEST_BUCKETS = 64;

/** The digest of nothing. */
export const ZERO_DIGEST = "0000000000000000";

/** murmur3 seed for buckets, distinct from the partition hash's so buckets spread within a partition. */
const BUCKET_SEED = 0x6c63_6231;

/** The digest bucket of `page` within its partition. */
export function bucketOf(page: string): number {
  return murmur3(page, BUCKET_SEED) % DIGEST_BUCKETS;
}

/**
 * Presence counters (`@viewers`, `@active`, `@connections`: '@' and lowercase letters, unlike
 * tombstones `@del:<counter>` and time buckets such as `@w:<counter>:<minute>`): entries that follow
 * what a DC's sockets hold right now, so at zero they carry nothing.
 */
export function isPresenceCounter(counter: string): boolean {
  return PRESENCE_NAME.test(counter);
}
const PRESENCE_NAME = /^@[a-z]+$/;

/**
 * Visit records: a page's unique-visitor registers and peaks (`@u:`, `@pm:`, `@ph:`). Like zero
 * presence, they say nobody is here now: a page holding nothing else is empty, and goes with them
 * (Store.removeEmptyPages), so a page visited once costs no more than the empty page TTL.
 */
export function isVisitRecord(counter: string): boolean {
  return VISIT_RECORD.test(counter);
}
const VISIT_RECORD = /^@(u:\d+:\d+|pm:\d+|ph:\d+)$/;

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/**
 * Time buckets (the protocol's windows.ts and series.ts; the store does not depend on the protocol):
 * the name's pattern, the width of its time unit, and how long after its unit ends a read may still
 * reach it.
 */
const TIME_BUCKETS: ReadonlyArray<{ pattern: RegExp; unitMs: number; keptMs: number }> = [
  // Window buckets `@w:<counter>:<minute>`: windows reach a day back.
  { pattern: /^@w:.+:(\d+)$/, unitMs: MINUTE_MS, keptMs: DAY_MS },
  // Unique-visitor registers `@u:<day>:<register>`: the current and the previous day are read.
  { pattern: /^@u:(\d+):\d+$/, unitMs: DAY_MS, keptMs: DAY_MS },
  // Peaks of the last hour by minute, `@pm:<minute>`, and of the last day by hour, `@ph:<hour>`.
  { pattern: /^@pm:(\d+)$/, unitMs: MINUTE_MS, keptMs: HOUR_MS },
  { pattern: /^@ph:(\d+)$/, unitMs: HOUR_MS, keptMs: DAY_MS },
];

/**
 * When a time bucket stops mattering: no read reaches its minute, hour or day any more. Undefined
 * for every other counter, which never expires. Every store removes a bucket from then on
 * ({@link Store.removeExpiredBuckets}) and leaves out one that arrives later (a merge, an old copy).
 */
export function bucketExpiresAt(counter: string): number | undefined {
  for (const { pattern, unitMs, keptMs } of TIME_BUCKETS) {
    const m = pattern.exec(counter);
    if (m !== null) return (Number(m[1]) + 1) * unitMs + keptMs;
  }
  return undefined;
}

/**
 * Whether a deleted counter may be purged: written in one data center at most, that entry zero
 * (`{z, z}`), and its activity (`2z`) exactly the tombstone's (the largest p): no change since the
 * delete, and no entry the delete saw missing here. Returns `z`, what the purge floor must reach, or
 * undefined when it must stay (docs/architecture.md, "Purging tombstones").
 */
export function purgeableAt(entries: Iterable<Entry>, tombstone: Iterable<Entry>): number | undefined {
  let deletedAt = 0;
  for (const e of tombstone) deletedAt = Math.max(deletedAt, e.p);
  let z: number | undefined;
  for (const e of entries) {
    if (z !== undefined || e.p !== e.n) return undefined;
    z = e.p;
  }
  return 2 * (z ?? 0) === deletedAt ? (z ?? 0) : undefined;
}

/**
 * Tombstones are the counters `@del:<counter>`: the same names as visibility.ts in the protocol
 * package, which the store does not depend on.
 */
export const TOMBSTONE_PREFIX = "@del:";

/** The counter a tombstone deletes, or undefined for any other counter. */
export function deletedCounterOf(name: string): string | undefined {
  return name.startsWith(TOMBSTONE_PREFIX) ? name.slice(TOMBSTONE_PREFIX.length) : undefined;
}

/**
 * What a page's entries add to its bucket's digest, by definition: every entry's hash, but for zero
 * presence entries and settled deletes.
 */
export function pageDigest(
  page: string,
  record: Readonly<Record<string, Readonly<Record<string, Entry>>>>,
): string {
  let d = ZERO_DIGEST;
  for (const [counter, entries] of Object.entries(record)) {
    const deleted = deletedCounterOf(counter) ?? counter;
    const tomb = record[`${TOMBSTONE_PREFIX}${deleted}`];
    if (
      tomb !== undefined &&
      purgeableAt(Object.values(record[deleted] ?? {}), Object.values(tomb)) !== undefined
    )
      continue;
    for (const [dc, entry] of Object.entries(entries)) d = xorDigest(d, entryHash(page, counter, dc, entry));
  }
  return d;
}

/** What one stored entry adds to its bucket's digest: its 64-bit hash, or nothing for zero presence. */
export function entryHash(page: string, counter: string, dc: string, entry: Entry): string {
  if (entry.p === entry.n && isPresenceCounter(counter)) return ZERO_DIGEST;
  return createHash("sha1")
    .update(`${page}\0${counter}\0${dc}\0${entry.p}:${entry.n}`)
    .digest("hex")
    .slice(0, 16);
}

/** XOR of two digests. */
export function xorDigest(a: string, b: string): string {
  const hi = (parseInt(a.slice(0, 8), 16) ^ parseInt(b.slice(0, 8), 16)) >>> 0;
  const lo = (parseInt(a.slice(8, 16), 16) ^ parseInt(b.slice(8, 16), 16)) >>> 0;
  return hi.toString(16).padStart(8, "0") + lo.toString(16).padStart(8, "0");
}

/**
 * Lua twins of the functions above, for the Redis scripts. A script works on digests as two 32-bit
 * lanes (numbers) and turns them into hex only to store them.
 */
export const LUA_DIGEST = `
local function is_presence(field)
  return string.find(field, "^@%l+%z") ~= nil
end
-- A visit record's field (isVisitRecord): a unique-visitor register or a peak.
local function is_visit(field)
  return string.find(field, "^@u:%d+:%d+%z") ~= nil or string.find(field, "^@p[mh]:%d+%z") ~= nil
end
-- When a time bucket's field expires (bucketExpiresAt), nil for any other field.
local function bucket_expiry_of(field)
  local unit, unit_ms, kept_ms
  if string.sub(field, 1, 3) == "@w:" then
    unit, unit_ms, kept_ms = string.match(field, ":(%d+)%z"), ${MINUTE_MS}, ${DAY_MS}
  elseif string.sub(field, 1, 3) == "@u:" then
    unit, unit_ms, kept_ms = string.match(field, "^@u:(%d+):%d+%z"), ${DAY_MS}, ${DAY_MS}
  elseif string.sub(field, 1, 4) == "@pm:" then
    unit, unit_ms, kept_ms = string.match(field, "^@pm:(%d+)%z"), ${MINUTE_MS}, ${HOUR_MS}
  elseif string.sub(field, 1, 4) == "@ph:" then
    unit, unit_ms, kept_ms = string.match(field, "^@ph:(%d+)%z"), ${HOUR_MS}, ${DAY_MS}
  end
  if not unit then return nil end
  return (tonumber(unit) + 1) * unit_ms + kept_ms
end
-- bucket_expiry_of's answers in this script run (false for none): a write asks up to four times an
-- entry (is it expired, what to index, which deleted counter it touches, does it keep the page from
-- being empty), and the patterns cost more than the lookup.
local expiries = {}
local function bucket_expiry(field)
  local known = expiries[field]
  if known ~= nil then return known or nil end
  local expiry = bucket_expiry_of(field)
  expiries[field] = expiry or false
  return expiry
end
local function is_zero(value)
  local p, n = string.match(value, "^(%d+):(%d+)$")
  return p == n
end
local function digest_lanes(d)
  return tonumber(string.sub(d, 1, 8), 16), tonumber(string.sub(d, 9, 16), 16)
end
local function lanes_digest(hi, lo)
  return bit.tohex(hi, 8) .. bit.tohex(lo, 8)
end
local function entry_lanes(page, field, value)
  if is_presence(field) and is_zero(value) then return 0, 0 end
  return digest_lanes(redis.sha1hex(page .. "\\0" .. field .. "\\0" .. value))
end
`;
