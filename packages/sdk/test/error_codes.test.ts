import { ERROR_CODES } from "@livecount/protocol";
import { describe, expect, test } from "vitest";
import {
  AuthError,
  IdempotencyConflictError,
  InvalidRequestError,
  LivecountError,
  RateLimitedError,
  SERVER_ERROR_CODES,
  UnavailableError,
} from "../src/index.js";
import { errorFromCode } from "../src/errors.js";

describe("sdk - error codes", () => {
  test("sdk - the SDK's copy of the error table matches the server's, code for code", () => {
    const server = Object.fromEntries(
      Object.entries(ERROR_CODES).map(([code, e]) => [code, { status: e.status, retryable: e.retryable }]),
    );
    expect(SERVER_ERROR_CODES).toEqual(server);
  });

  test("sdk - every server code becomes the right error class, status and retryability", () => {
    for (const [code, { status, retryable }] of Object.entries(SERVER_ERROR_CODES)) {
      const e = errorFromCode(code, "m");
      expect(e).toBeInstanceOf(LivecountError);
      expect(e).toMatchObject({ code, status, retryable, message: "m" });
      const expected =
        status === 401 || status === 403
          ? AuthError
          : code === "idempotency_conflict"
            ? IdempotencyConflictError
            : code === "rate_limited"
              ? RateLimitedError
              : retryable
                ? UnavailableError
                : InvalidRequestError;
      expect(e).toBeInstanceOf(expected);
      expect(e.name).toBe(expected.name);
    }
  });

  test("sdk - a code this version does not know is judged by its status", () => {
    expect(errorFromCode("brand_new", "m", { status: 502 })).toMatchObject({ retryable: true });
    expect(errorFromCode("brand_new", "m", { status: 422 })).toBeInstanceOf(InvalidRequestError);
    expect(errorFromCode("brand_new", "m", { status: 422 })).toMatchObject({ retryable: false });
  });
});
