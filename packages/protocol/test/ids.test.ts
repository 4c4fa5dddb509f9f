import { describe, expect, it } from "vitest";
import {
  COUNTER_NAME_MAX_LENGTH,
  ERROR_CODES,
  IDEMPOTENCY_KEY_MAX_LENGTH,
  INTERNAL_ID_MAX_LENGTH,
  PAGE_ID_MAX_LENGTH,
  ProtocolError,
  VIEWERS_COUNTER,
  VIEWER_ID_MAX_LENGTH,
  VIEWER_KEY_MAX_LENGTH,
  isCounterName,
  isErrorCode,
  isIdempotencyKey,
  isInternalId,
  isPageId,
  isViewerId,
  isViewerKey,
} from "../src/index.js";

const NOT_STRINGS: unknown[] = [undefined, null, 0, 1, true, {}, [], ["a"], Symbol("a")];

/** The printable-ASCII rule shared by page ids, viewer ids, idempotency keys and internal ids. */
const PRINTABLE_RULES = [
  { name: "page id", check: isPageId, max: PAGE_ID_MAX_LENGTH },
  { name: "viewer id", check: isViewerId, max: VIEWER_ID_MAX_LENGTH },
  { name: "idempotency key", check: isIdempotencyKey, max: IDEMPOTENCY_KEY_MAX_LENGTH },
  { name: "internal id", check: isInternalId, max: INTERNAL_ID_MAX_LENGTH },
  { name: "viewer key", check: isViewerKey, max: VIEWER_KEY_MAX_LENGTH },
] as const;

describe("ids", () => {
  it("ids - page and viewer ids are limited to 128 characters by protocol v1", () => {
    expect(PAGE_ID_MAX_LENGTH).toBe(128);
    expect(VIEWER_ID_MAX_LENGTH).toBe(128);
    expect(COUNTER_NAME_MAX_LENGTH).toBe(64);
  });

  for (const { name, check, max } of PRINTABLE_RULES) {
    it(`ids - a ${name} is 1..${max} printable ASCII characters`, () => {
      expect(check("")).toBe(false);
      expect(check("a")).toBe(true);
      expect(check("a".repeat(max))).toBe(true);
      expect(check("a".repeat(max + 1))).toBe(false);
      expect(check("\x20")).toBe(false);
      expect(check("a b")).toBe(false);
      expect(check("\x21")).toBe(true);
      expect(check("\x7e")).toBe(true);
      expect(check("\x7f")).toBe(false);
      expect(check("a\x7f")).toBe(false);
      expect(check("\x00")).toBe(false);
      expect(check("a\n")).toBe(false);
      expect(check("\t")).toBe(false);
      expect(check("café")).toBe(false);
      expect(check("\u00a0")).toBe(false);
      expect(check("😀")).toBe(false);
      expect(check("\ud800")).toBe(false);
      expect(check('/news/2024?id=7&x="y"')).toBe(true);
      let all = "";
      for (let c = 0x21; c <= 0x7e; c++) all += String.fromCharCode(c);
      expect(check(all)).toBe(true);
      for (const v of NOT_STRINGS) expect(check(v)).toBe(false);
    });
  }

  it("ids - a counter name is 1..64 of [A-Za-z0-9_:.-]", () => {
    expect(isCounterName("")).toBe(false);
    expect(isCounterName("a")).toBe(true);
    expect(isCounterName("a".repeat(64))).toBe(true);
    expect(isCounterName("a".repeat(65))).toBe(false);
    expect(isCounterName("ABCXYZabcxyz0189_:.-")).toBe(true);
    for (const c of ["A", "Z", "a", "z", "0", "9", "_", ":", ".", "-"]) expect(isCounterName(c)).toBe(true);
    for (let code = 0; code < 0x80; code++) {
      const c = String.fromCharCode(code);
      expect(isCounterName(c), `0x${code.toString(16)}`).toBe(/[A-Za-z0-9_:.-]/.test(c));
    }
    for (const bad of ["likes ", " likes", "like/s", "like+s", "likes@", "é", "ﬁ", "😀", "a\n"]) {
      expect(isCounterName(bad), bad).toBe(false);
    }
    for (const v of NOT_STRINGS) expect(isCounterName(v)).toBe(false);
  });

  it("ids - the presence counter can never collide with a publisher counter", () => {
    expect(isCounterName(VIEWERS_COUNTER)).toBe(false);
  });
});

describe("errors", () => {
  it("errors - the code table is frozen and looked up by own keys only", () => {
    expect(Object.isFrozen(ERROR_CODES)).toBe(true);
    expect(isErrorCode("bad_frame")).toBe(true);
    for (const v of ["constructor", "toString", "__proto__", "", "BAD_FRAME", 1, null])
      expect(isErrorCode(v)).toBe(false);
  });

  it("errors - a ProtocolError carries its code, status, retryability and cause", () => {
    const cause = new Error("root");
    const err = new ProtocolError("rate_limited", undefined, { cause });
    expect(err).toBeInstanceOf(Error);
    expect(err.name).toBe("ProtocolError");
    expect(err.code).toBe("rate_limited");
    expect(err.message).toBe(ERROR_CODES.rate_limited.message);
    expect(err.status).toBe(429);
    expect(err.retryable).toBe(true);
    expect(err.cause).toBe(cause);
  });
});
