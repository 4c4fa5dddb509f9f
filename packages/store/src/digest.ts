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
 * tombstones `@del:<counter>` and window buckets `@w:<counter>:<minute>`): entries that follow what
 * a DC's sockets hold right now, so at zero they carry nothing.
 */
export function isPresenceCounter(counter: string): boolean {
  return PRESENCE_NAME.test(counter);
}
const PRESENCE_NAME = /^@[a-z]+$/;

/** Window buckets (the protocol's windows.ts; the store does not depend on the protocol). */
const WINDOW_BUCKET = /^@w:.+:(\d+)$/;
const WINDOW_BUCKET_MS = 60_000;
/** The longest window readers may ask for. */
const WINDOW_SPAN_MS = 86_400_000;

/**
 * When a window bucket stops mattering: the longest window no longer reaches its minute. Undefined
 * for every other counter, which never expires. Every store removes a bucket from then on
 * ({@link Store.removeExpiredBuckets}) and leaves out one that arrives later (a merge, an old copy).
 */
export function bucketExpiresAt(counter: string): number | undefined {
  const m = WINDOW_BUCKET.exec(counter);
  return m === null ? undefined : (Number(m[1]) + 1) * WINDOW_BUCKET_MS + WINDOW_SPAN_MS;
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
-- When a window bucket's field expires (bucketExpiresAt), nil for any other field.
local function bucket_expiry(field)
  if string.sub(field, 1, 3) ~= "@w:" then return nil end
  local minute = string.match(field, ":(%d+)%z")
  if not minute then return nil end
  return (tonumber(minute) + 1) * ${WINDOW_BUCKET_MS} + ${WINDOW_SPAN_MS}
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
