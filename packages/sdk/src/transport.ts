/**
 * HTTP with retries. A request is sent again, byte for byte (same body, same Idempotency-Key), on
 * no answer, a timeout, 429 and retryable 5xx codes, with full-jitter backoff that respects
 * Retry-After. Anything else is thrown at once as a typed {@link LivecountError}.
 */
import { fullJitterMs, parseRetryAfter, sleep, type RetryOptions } from "./backoff.js";
import { LivecountError, errorFromCode } from "./errors.js";

export type FetchFn = typeof globalThis.fetch;

export interface TransportOptions {
  /** e.g. `https://livecount.example.com`, without a trailing slash. */
  readonly baseUrl: string;
  readonly publisherKey: string | undefined;
  readonly fetch: FetchFn;
  readonly timeoutMs: number;
  readonly retry: RetryOptions;
}

export interface HttpRequest {
  readonly method: "GET" | "PUT" | "POST" | "DELETE";
  /** Path and query, already encoded: `/v1/pages/a%2Fb/counter`. */
  readonly path: string;
  /** Serialized to JSON. */
  readonly body?: unknown;
  /** Send the publisher key (every change does). */
  readonly auth?: boolean;
  readonly idempotencyKey?: string;
  readonly signal?: AbortSignal | undefined;
  /** Page the request is about, recorded on errors. */
  readonly page?: string;
}

export interface HttpAnswer {
  readonly status: number;
  readonly headers: { get(name: string): string | null };
  /** The parsed JSON body; undefined for an empty body. */
  readonly body: unknown;
}

/** Called before each retry: which try failed (from 1) and how. For logs and tests. */
export type RetryListener = (attempt: number, error: LivecountError, delayMs: number) => void;

export class Transport {
  readonly #o: TransportOptions;
  readonly #onRetry: RetryListener | undefined;

  constructor(options: TransportOptions, onRetry?: RetryListener) {
    this.#o = options;
    this.#onRetry = onRetry;
  }

  /** Sends `req` until it gets a 2xx answer, a non-retryable error, or runs out of tries. */
  async send(req: HttpRequest): Promise<HttpAnswer> {
    const { attempts, baseMs, maxMs } = this.#o.retry;
    const body = req.body === undefined ? undefined : JSON.stringify(req.body);
    for (let attempt = 1; ; attempt++) {
      const result = await this.#once(req, body);
      if (!(result instanceof LivecountError)) return result;
      if (!result.retryable || attempt >= attempts) throw result;
      const delayMs = Math.max(fullJitterMs(attempt - 1, baseMs, maxMs), result.retryAfterMs ?? 0);
      this.#onRetry?.(attempt, result, delayMs);
      await sleep(delayMs, req.signal);
    }
  }

  /** One try: the answer, or the error it amounts to. Throws only when the caller aborts. */
  async #once(req: HttpRequest, body: string | undefined): Promise<HttpAnswer | LivecountError> {
    const headers: Record<string, string> = { accept: "application/json" };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (req.auth === true && this.#o.publisherKey !== undefined)
      headers.authorization = `Bearer ${this.#o.publisherKey}`;
    if (req.idempotencyKey !== undefined) headers["idempotency-key"] = req.idempotencyKey;
    const page = req.page !== undefined ? { page: req.page } : {};

    req.signal?.throwIfAborted();
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, this.#o.timeoutMs);
    const onAbort = (): void => controller.abort(req.signal!.reason);
    req.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      // Called as a plain function: a browser's fetch throws when called as a method of another object.
      const fetchFn = this.#o.fetch;
      const res = await fetchFn(this.#o.baseUrl + req.path, {
        method: req.method,
        headers,
        ...(body !== undefined ? { body } : {}),
        signal: controller.signal,
      });
      // Reading the body is part of the try: a connection cut mid-body is a network error.
      const text = await res.text();
      const parsed = parseBody(text);
      if (res.ok) {
        if (parsed === INVALID)
          return new LivecountError("bad_response", `${req.method} ${req.path}: answer is not JSON`, {
            status: res.status,
            retryable: false,
            ...page,
          });
        return { status: res.status, headers: res.headers, body: parsed };
      }
      const retryAfterMs = parseRetryAfter(res.headers.get("retry-after"));
      const error = errorBody(parsed);
      return errorFromCode(
        error?.code ?? "http_error",
        error?.message ?? `${req.method} ${req.path}: HTTP ${res.status}`,
        { status: res.status, ...page, ...(retryAfterMs !== undefined ? { retryAfterMs } : {}) },
      );
    } catch (err) {
      if (req.signal?.aborted) throw req.signal.reason;
      if (timedOut)
        return errorFromCode(
          "request_timeout",
          `${req.method} ${req.path}: no answer within ${this.#o.timeoutMs} ms`,
          { cause: err, ...page },
        );
      return errorFromCode("network_error", `${req.method} ${req.path}: ${describe(err)}`, {
        cause: err,
        ...page,
      });
    } finally {
      clearTimeout(timer);
      req.signal?.removeEventListener("abort", onAbort);
    }
  }
}

const INVALID = Symbol("invalid");

function parseBody(text: string): unknown {
  if (text === "") return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return INVALID;
  }
}

/** `{"error":{"code","message"}}`, protocol v1's error body, if that is what `body` is. */
function errorBody(body: unknown): { code: string; message: string } | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const error = (body as { error?: unknown }).error;
  if (typeof error !== "object" || error === null) return undefined;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (typeof code !== "string" || code === "") return undefined;
  return { code, message: typeof message === "string" ? message : code };
}

/** fetch's TypeError says only "fetch failed"; the reason is in its cause (undici) if anywhere. */
function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
  return `${err.message}${cause}`;
}
