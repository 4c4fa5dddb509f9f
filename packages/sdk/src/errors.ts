/**
 * Every error the SDK throws or reports is a {@link LivecountError} with a stable `code`: the
 * server's code from protocol v1 when the server answered (`unauthorized`, `invalid_counter`,
 * `rate_limited`, ...), or one of the SDK's own codes ({@link ClientErrorCode}) when it did not.
 * Switch on `code` or on the subclass; never on the message.
 */

/**
 * Protocol v1's error table (docs/protocol.md): HTTP status and whether the same request may
 * succeed later unchanged. A copy, so the SDK has no runtime dependency; a test keeps it equal
 * to the server's table.
 */
export const SERVER_ERROR_CODES = Object.freeze({
  bad_frame: { status: 400, retryable: false },
  unknown_type: { status: 400, retryable: false },
  invalid_page: { status: 400, retryable: false },
  invalid_viewer: { status: 400, retryable: false },
  invalid_counter: { status: 400, retryable: false },
  invalid_body: { status: 400, retryable: false },
  invalid_idempotency_key: { status: 400, retryable: false },
  invalid_query: { status: 400, retryable: false },
  unauthorized: { status: 401, retryable: false },
  forbidden: { status: 403, retryable: false },
  not_found: { status: 404, retryable: false },
  method_not_allowed: { status: 405, retryable: false },
  idempotency_conflict: { status: 409, retryable: false },
  payload_too_large: { status: 413, retryable: false },
  upgrade_required: { status: 426, retryable: false },
  too_many_pages: { status: 429, retryable: false },
  rate_limited: { status: 429, retryable: true },
  unavailable: { status: 503, retryable: true },
  timeout: { status: 504, retryable: true },
  internal: { status: 500, retryable: true },
} as const satisfies Record<string, { status: number; retryable: boolean }>);

export type ServerErrorCode = keyof typeof SERVER_ERROR_CODES;

/** Codes for failures the server did not report. The server never sends these. */
export type ClientErrorCode =
  /** The request got no answer: connection refused or reset, DNS failure, response cut off. */
  | "network_error"
  /** The request got no answer within `timeoutMs`. */
  | "request_timeout"
  /** A 2xx answer the SDK could not read (not JSON, or missing fields). */
  | "bad_response"
  /** An error status without protocol v1's error body (a proxy's 502, say). */
  | "http_error"
  /** `queue()` while `maxPendingItems` items wait to be sent. */
  | "queue_full"
  /** The client was closed. */
  | "client_closed"
  /** `subscribe()` without a WebSocket implementation (Node < 22: pass one). */
  | "websocket_unavailable"
  /** `subscribe()` with `mode: "join"` on a client with `transport: "sse"`: an event stream only watches. */
  | "join_needs_websocket"
  /** A `subscribe()` listener threw (reported to `onError`, never thrown into the socket). */
  | "listener_error"
  /** Some items of a batch or of the fire-and-forget queue failed; see the error's items. */
  | "partial_failure";

/** A code the server sent, one of the SDK's, or (from a newer server) a code this version does not know. */
export type LivecountErrorCode = ServerErrorCode | ClientErrorCode | (string & {});

export interface LivecountErrorOptions {
  /** HTTP status of the answer; undefined when there was none (network errors, local checks). */
  readonly status?: number;
  /** Whether the same request may succeed later unchanged. Default: from the code. */
  readonly retryable?: boolean;
  /** The page the failed request named, when it named one. */
  readonly page?: string;
  /** Milliseconds the server asked to wait before retrying (`Retry-After`). */
  readonly retryAfterMs?: number;
  readonly cause?: unknown;
}

const CLIENT_RETRYABLE: ReadonlySet<string> = new Set(["network_error", "request_timeout"]);

function isServerErrorCode(code: string): code is ServerErrorCode {
  return Object.hasOwn(SERVER_ERROR_CODES, code);
}

/** Whether `code` (with `status`, for codes this version does not know) is worth retrying. */
export function isRetryable(code: string, status?: number): boolean {
  if (isServerErrorCode(code)) return SERVER_ERROR_CODES[code].retryable;
  if (CLIENT_RETRYABLE.has(code)) return true;
  return status !== undefined && (status >= 500 || status === 429 || status === 408);
}

export class LivecountError extends Error {
  override name = "LivecountError";
  readonly code: LivecountErrorCode;
  readonly status: number | undefined;
  readonly retryable: boolean;
  readonly page: string | undefined;
  readonly retryAfterMs: number | undefined;

  constructor(code: LivecountErrorCode, message: string, options: LivecountErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.status = options.status;
    this.retryable = options.retryable ?? isRetryable(code, options.status);
    this.page = options.page;
    this.retryAfterMs = options.retryAfterMs;
  }
}

/** 401 `unauthorized` or 403 `forbidden`: a missing, unknown or insufficient publisher key. */
export class AuthError extends LivecountError {
  override name = "AuthError";
}

/**
 * The request itself is wrong and will never succeed: an invalid page id, counter name, amount
 * or key (caught before sending when the SDK can tell), a malformed body, an unknown route, a
 * body too large. Status 400, 404, 405 or 413.
 */
export class InvalidRequestError extends LivecountError {
  override name = "InvalidRequestError";
}

/** 409 `idempotency_conflict`: the idempotency key was already used for a different change. */
export class IdempotencyConflictError extends LivecountError {
  override name = "IdempotencyConflictError";
}

/** 429 `rate_limited`, still failing after every retry; `retryAfterMs` says how long to back off. */
export class RateLimitedError extends LivecountError {
  override name = "RateLimitedError";
}

/**
 * The service could not take the request: `unavailable`, `timeout`, `internal` or another 5xx,
 * after every retry. A change that failed this way may or may not have been applied: retry it
 * with the same idempotency key and it counts at most once.
 */
export class UnavailableError extends LivecountError {
  override name = "UnavailableError";
}

/**
 * No answer at all (`network_error`, `request_timeout`), after every retry. As with
 * {@link UnavailableError}, a change may have been applied: retry with the same key.
 */
export class NetworkError extends LivecountError {
  override name = "NetworkError";
}

/** `client_closed`: the client was closed before or while the call ran. */
export class ClientClosedError extends LivecountError {
  override name = "ClientClosedError";
  constructor(message = "the livecount client is closed") {
    super("client_closed", message, { retryable: false });
  }
}

/**
 * `queue_full`: the fire-and-forget queue holds `maxPendingItems` items not yet durable. Nothing
 * was queued; `await client.flush()` and queue again, or send fewer distinct counters.
 */
export class QueueFullError extends LivecountError {
  override name = "QueueFullError";
  constructor(limit: number) {
    super("queue_full", `the fire-and-forget queue is full (${limit} items pending); await flush() first`, {
      retryable: true,
    });
  }
}

/** One counter change of a batch: the body item of `POST /v1/counters/increment`. */
export interface ChangeItem {
  readonly page: string;
  readonly counter: string;
  /** Signed change: positive increments, negative decrements. */
  readonly change: number;
  /** The item's idempotency key. */
  readonly id: string;
}

/** An item that could not be made durable, with why. */
export interface FailedItem {
  readonly item: ChangeItem;
  readonly error: LivecountError;
}

/**
 * `partial_failure`: some items of `incrementMany()` or of the fire-and-forget queue failed.
 * Every failed item keeps its idempotency key (`item.id`): sending the same items again with
 * `incrementMany()` can never count one twice. Items not listed succeeded.
 */
export class PartialFailureError extends LivecountError {
  override name = "PartialFailureError";
  readonly failed: readonly FailedItem[];

  constructor(failed: readonly FailedItem[], what: string) {
    const first = failed[0]?.error;
    super("partial_failure", `${failed.length} ${what} failed; first: ${first?.code}: ${first?.message}`, {
      retryable: failed.every((f) => f.error.retryable),
      cause: first,
    });
    this.failed = failed;
  }
}

/** The error for a server code: the right subclass, status and retryability. */
export function errorFromCode(
  code: string,
  message: string,
  options: LivecountErrorOptions & { readonly status?: number } = {},
): LivecountError {
  const status = options.status ?? (isServerErrorCode(code) ? SERVER_ERROR_CODES[code].status : undefined);
  const opts = { ...options, status };
  switch (code) {
    case "unauthorized":
    case "forbidden":
      return new AuthError(code, message, opts);
    case "idempotency_conflict":
      return new IdempotencyConflictError(code, message, opts);
    case "rate_limited":
      return new RateLimitedError(code, message, opts);
    case "network_error":
    case "request_timeout":
      return new NetworkError(code, message, opts);
  }
  const retryable = opts.retryable ?? isRetryable(code, status);
  if (retryable) return new UnavailableError(code, message, opts);
  if (status !== undefined && status >= 400 && status < 500)
    return new InvalidRequestError(code, message, opts);
  return new LivecountError(code, message, opts);
}
