/**
 * Protocol v1 identifier rules. A page id and a viewer id are 1..128 printable ASCII characters:
 * room for a URL path or a UUID with a prefix, and small enough that an id is a short bus subject
 * token, Redis field and Map key, copied into every frame and batch that names it.
 */
export const PAGE_ID_MAX_LENGTH = 128;
export const VIEWER_ID_MAX_LENGTH = 128;
/**
 * A counter name is 1..64 of [A-Za-z0-9_:.-]: a name, not data. Every count frame carries every
 * counter name of its page (up to LIVECOUNT_MAX_COUNTERS_PER_PAGE), so the name's length multiplies
 * into each frame a watcher gets.
 */
export const COUNTER_NAME_MAX_LENGTH = 64;
/**
 * An idempotency key (`Idempotency-Key` header, `id` of a batch increment) is 1..128 printable
 * ASCII: a UUID, or a request id with a prefix, fits; each key is kept for a day in Redis and
 * sent to other data centers, so its length is paid for every change.
 */
export const IDEMPOTENCY_KEY_MAX_LENGTH = 128;
/**
 * Internal ids (data center, counter node, gateway incarnation) on the bus: 1..128 printable ASCII.
 * Configuration is stricter; this only keeps malformed bus messages out.
 */
export const INTERNAL_ID_MAX_LENGTH = 128;
/** A namespaced viewer key ("v:<viewer id>" or "s:<gateway incarnation>:<socket seq>") on the bus. */
export const VIEWER_KEY_MAX_LENGTH = 2 + VIEWER_ID_MAX_LENGTH + 1 + INTERNAL_ID_MAX_LENGTH;

/**
 * Longest join token accepted: a JWT of a 128-character page or prefix and sub, expiry and a few
 * more claims is under 600 characters; the rest is room, within the 4 KiB frame.
 */
export const TOKEN_MAX_LENGTH = 2048;

const PRINTABLE_ASCII = /^[\x21-\x7e]+$/;
/** A JWS in compact serialization: three base64url parts. */
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;
const COUNTER_NAME = /^[A-Za-z0-9_:.-]+$/;

/**
 * The internal counter name for a page's presence. '@' is outside the public counter-name
 * alphabet, so no publisher counter can collide with it.
 */
export const VIEWERS_COUNTER = "@viewers";
/** Viewers with at least one active socket on the page (a visible tab), kept like `@viewers`. */
export const ACTIVE_COUNTER = "@active";
/** Open sockets joined to the page, kept like `@viewers`. */
export const CONNECTIONS_COUNTER = "@connections";
/** The presence counters: entries that follow what a data center's sockets hold right now. */
export const PRESENCE_COUNTERS: readonly string[] = [VIEWERS_COUNTER, ACTIVE_COUNTER, CONNECTIONS_COUNTER];
/**
 * Names of presence counters on the bus: '@' and lowercase letters. Wider than PRESENCE_COUNTERS so
 * that a presence counter a later release adds passes through this one (kept, merged, not shown)
 * instead of making every message that carries it malformed.
 */
const PRESENCE_COUNTER_NAME = /^@[a-z]{1,32}$/;

export function isPresenceCounterName(v: unknown): v is string {
  return typeof v === "string" && PRESENCE_COUNTER_NAME.test(v);
}

function isPrintableAscii(v: unknown, maxLength: number): v is string {
  return typeof v === "string" && v.length >= 1 && v.length <= maxLength && PRINTABLE_ASCII.test(v);
}

export function isPageId(v: unknown): v is string {
  return isPrintableAscii(v, PAGE_ID_MAX_LENGTH);
}

export function isViewerId(v: unknown): v is string {
  return isPrintableAscii(v, VIEWER_ID_MAX_LENGTH);
}

export function isIdempotencyKey(v: unknown): v is string {
  return isPrintableAscii(v, IDEMPOTENCY_KEY_MAX_LENGTH);
}

export function isInternalId(v: unknown): v is string {
  return isPrintableAscii(v, INTERNAL_ID_MAX_LENGTH);
}

export function isViewerKey(v: unknown): v is string {
  return isPrintableAscii(v, VIEWER_KEY_MAX_LENGTH);
}

/** A page-id prefix for listings: 0..128 printable ASCII characters (empty lists every page). */
export function isPagePrefix(v: unknown): v is string {
  return v === "" || isPrintableAscii(v, PAGE_ID_MAX_LENGTH);
}

export function isCounterName(v: unknown): v is string {
  return (
    typeof v === "string" && v.length >= 1 && v.length <= COUNTER_NAME_MAX_LENGTH && COUNTER_NAME.test(v)
  );
}

/** A join token's shape (its signature and claims are the gateway's to check): a compact JWS. */
export function isTokenShape(v: unknown): v is string {
  return typeof v === "string" && v.length <= TOKEN_MAX_LENGTH && COMPACT_JWS.test(v);
}
