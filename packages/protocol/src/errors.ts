/**
 * The one table of stable error codes. Codes are part of protocol v1: clients switch on them, so a
 * code is never renamed or reused. `status` is the HTTP status used when the error answers an HTTP
 * request; `retryable` says whether the same request may succeed later unchanged.
 */
export const ERROR_CODES = Object.freeze({
  bad_frame: { status: 400, retryable: false, message: "frame is not valid JSON or msgpack" },
  unknown_type: { status: 400, retryable: false, message: "unknown frame type" },
  invalid_page: {
    status: 400,
    retryable: false,
    message: "page id must be 1..128 printable ASCII characters",
  },
  invalid_viewer: {
    status: 400,
    retryable: false,
    message: "viewer id must be 1..128 printable ASCII characters",
  },
  invalid_counter: {
    status: 400,
    retryable: false,
    message: "counter name must be 1..64 of [A-Za-z0-9_:.-]",
  },
  invalid_body: { status: 400, retryable: false, message: "request body is malformed" },
  invalid_idempotency_key: {
    status: 400,
    retryable: false,
    message: "idempotency key must be 1..128 printable ASCII characters",
  },
  invalid_query: { status: 400, retryable: false, message: "query parameters are malformed" },
  unauthorized: { status: 401, retryable: false, message: "a valid key or token is required" },
  forbidden: { status: 403, retryable: false, message: "not allowed" },
  not_found: { status: 404, retryable: false, message: "not found" },
  method_not_allowed: { status: 405, retryable: false, message: "method not allowed" },
  idempotency_conflict: {
    status: 409,
    retryable: false,
    message: "idempotency key was used for a different request",
  },
  payload_too_large: { status: 413, retryable: false, message: "payload too large" },
  upgrade_required: {
    status: 426,
    retryable: false,
    message: "this endpoint takes a WebSocket upgrade, Sec-WebSocket-Version 13",
  },
  too_many_pages: { status: 429, retryable: false, message: "too many pages on one connection" },
  rate_limited: { status: 429, retryable: true, message: "too many requests" },
  unavailable: { status: 503, retryable: true, message: "service temporarily unavailable" },
  timeout: { status: 504, retryable: true, message: "the owner of the page did not answer in time" },
  internal: { status: 500, retryable: true, message: "internal error" },
} as const satisfies Record<string, { status: number; retryable: boolean; message: string }>);

export type ErrorCode = keyof typeof ERROR_CODES;

export function isErrorCode(v: unknown): v is ErrorCode {
  return typeof v === "string" && Object.hasOwn(ERROR_CODES, v);
}

/**
 * An error that crosses a boundary (socket, HTTP, bus) as a stable code. `page`: the valid page id
 * the failed request named, if any (error frames carry it).
 */
export class ProtocolError extends Error {
  override name = "ProtocolError";
  readonly code: ErrorCode;
  readonly page: string | undefined;

  constructor(
    code: ErrorCode,
    message: string = ERROR_CODES[code].message,
    options?: { cause?: unknown; page?: string },
  ) {
    super(message, options);
    this.code = code;
    this.page = options?.page;
  }

  get status(): number {
    return ERROR_CODES[this.code].status;
  }

  get retryable(): boolean {
    return ERROR_CODES[this.code].retryable;
  }
}
