/**
 * Protocol v1 identifier rules, checked before anything is sent so a bad id fails at once, with
 * the code the server would give, and never poisons a batch. Idempotency keys are generated here.
 */
import { InvalidRequestError } from "./errors.js";

/** A page id, viewer id or idempotency key: 1..128 printable ASCII characters (0x21..0x7E). */
const PRINTABLE_ID = /^[\x21-\x7e]{1,128}$/;
/** A counter name: 1..64 of [A-Za-z0-9_:.-]. */
const COUNTER_NAME = /^[A-Za-z0-9_:.-]{1,64}$/;

export function isPageId(v: unknown): v is string {
  return typeof v === "string" && PRINTABLE_ID.test(v);
}

export function isCounterName(v: unknown): v is string {
  return typeof v === "string" && COUNTER_NAME.test(v);
}

export function isIdempotencyKey(v: unknown): v is string {
  return typeof v === "string" && PRINTABLE_ID.test(v);
}

export function checkPage(page: unknown): string {
  if (!isPageId(page))
    throw new InvalidRequestError("invalid_page", "page id must be 1..128 printable ASCII characters", {
      status: 400,
    });
  return page;
}

export function checkViewer(viewer: unknown): string {
  if (!isPageId(viewer))
    throw new InvalidRequestError("invalid_viewer", "viewer id must be 1..128 printable ASCII characters", {
      status: 400,
    });
  return viewer;
}

export function checkCounter(counter: unknown, page?: string): string {
  if (!isCounterName(counter))
    throw new InvalidRequestError("invalid_counter", "counter name must be 1..64 of [A-Za-z0-9_:.-]", {
      status: 400,
      ...(page !== undefined ? { page } : {}),
    });
  return counter;
}

export function checkKey(key: unknown): string {
  if (!isIdempotencyKey(key))
    throw new InvalidRequestError(
      "invalid_idempotency_key",
      "idempotency key must be 1..128 printable ASCII characters",
      { status: 400 },
    );
  return key;
}

/**
 * A fresh idempotency key: a random UUID (v4). `crypto.randomUUID` exists only in secure
 * contexts in browsers, so fall back to `getRandomValues`, which exists everywhere.
 */
export function newIdempotencyKey(): string {
  const c = globalThis.crypto;
  if (typeof c.randomUUID === "function") return c.randomUUID();
  const b = c.getRandomValues(new Uint8Array(16));
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
