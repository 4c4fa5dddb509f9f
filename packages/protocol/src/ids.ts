/** Protocol v1 identifier rules. A page id and a viewer id are 1..128 printable ASCII characters. */
export const PAGE_ID_MAX_LENGTH = 128;
export const VIEWER_ID_MAX_LENGTH = 128;
export const COUNTER_NAME_MAX_LENGTH = 64;

const PRINTABLE_ASCII = /^[\x21-\x7e]+$/;
const COUNTER_NAME = /^[A-Za-z0-9_:.-]+$/;

/**
 * The internal counter name for a page's presence. '@' is outside the public counter-name
 * alphabet, so no publisher counter can collide with it.
 */
export const VIEWERS_COUNTER = "@viewers";

export function isPageId(v: unknown): v is string {
  return typeof v === "string" && v.length >= 1 && v.length <= PAGE_ID_MAX_LENGTH && PRINTABLE_ASCII.test(v);
}

export function isViewerId(v: unknown): v is string {
  return typeof v === "string" && v.length >= 1 && v.length <= VIEWER_ID_MAX_LENGTH && PRINTABLE_ASCII.test(v);
}

export function isCounterName(v: unknown): v is string {
  return (
    typeof v === "string" && v.length >= 1 && v.length <= COUNTER_NAME_MAX_LENGTH && COUNTER_NAME.test(v)
  );
}
