/**
 * The demo page's buttons (a like, reactions, an unread badge), served by the all-in-one process.
 * The browser posts here; this route changes the counters through the publisher SDK with the
 * configured publisher key, the way a site's own back end would. The key never reaches the
 * browser, and the browser can touch nothing but the demo page's own fixed set of counters.
 *
 *   POST /demo/counter  {"page":"demo","counter":"reaction:heart","action":"increment","id":"<uuid>"}
 *   POST /demo/like     (kept for older copies of the page: one like)
 *
 * Answer: `{"page","counter","value","updated_at"}`; errors are protocol v1 error bodies.
 *
 * The routes write without a key, so they guard themselves: only same-origin requests from the
 * demo page (`Sec-Fetch-Site: same-origin`, or an `Origin` naming this host), only
 * `content-type: application/json` (a cross-site form or `text/plain` POST cannot send that without
 * a preflight), and their own small budget (LIVECOUNT_DEMO_RATE / LIVECOUNT_DEMO_BURST), so a
 * script can spend neither the publisher key's budget nor more than a trickle of writes.
 */
import { RateLimitedError, type HttpRoute, type RequestInfo } from "@livecount/gateway";
import { ProtocolError, isErrorCode, isIdempotencyKey } from "@livecount/protocol";
import { fullBucket, takeTokens, type BucketLimits, type BucketState, type Logger } from "@livecount/runtime";
import { AuthError, LivecountClient, LivecountError, type CounterValue, type FetchFn } from "@livecount/sdk";

export type DemoAction = "increment" | "reset";

/** What the demo page may do, by counter. Anything else is 403 forbidden. */
export const DEMO_COUNTERS: Readonly<Record<string, readonly DemoAction[]>> = Object.freeze({
  likes: ["increment"],
  "reaction:thumbs": ["increment"],
  "reaction:heart": ["increment"],
  "reaction:party": ["increment"],
  // "Simulate a notification" adds one; "mark read" resets it (an observed reset).
  unread: ["increment", "reset"],
});

export interface DemoRoutesOptions {
  /** The demo page's id: the only page these routes change. */
  readonly page: string;
  readonly logger: Logger;
  /** The routes' own budget, for all browsers together: changes per second, sustained / at once. */
  readonly budget: BucketLimits;
  /** Epoch-ms, for the budget. */
  readonly now: () => number;
  /** Per-try timeout of the SDK's requests to the gateway, in ms. Default 5000. */
  readonly timeoutMs?: number;
}

/** The routes and the SDK client behind them; `connect` once the gateway listens. */
export class DemoRoutes {
  readonly routes: ReadonlyMap<string, HttpRoute>;
  readonly #o: DemoRoutesOptions;
  readonly #bucket: BucketState;
  #client: LivecountClient | undefined;

  constructor(options: DemoRoutesOptions) {
    this.#o = options;
    this.#bucket = fullBucket(options.budget, options.now());
    this.routes = new Map<string, HttpRoute>([
      ["/demo/counter", (req, body) => this.#guarded(req, async () => this.#counter(await body()))],
      ["/demo/like", (req) => this.#guarded(req, () => this.#apply("likes", "increment", undefined))],
    ]);
  }

  /**
   * Points the SDK at the gateway (`http://127.0.0.1:<port>`) with a configured publisher key;
   * `fetch` when the gateway needs one of its own (its TLS certificate).
   */
  connect(baseUrl: string, publisherKey: string, fetch?: FetchFn): void {
    this.#client = new LivecountClient({
      baseUrl,
      publisherKey,
      ...(fetch !== undefined ? { fetch } : {}),
      timeoutMs: this.#o.timeoutMs ?? 5000,
      onError: (err) => this.#o.logger.warn({ err }, "demo client error"),
    });
  }

  async close(): Promise<void> {
    const client = this.#client;
    this.#client = undefined;
    await client?.close();
  }

  /**
   * Same-origin JSON requests reach `route`; others are refused by their headers alone, before
   * their body is read. The budget is spent by the change itself (#apply), once it is valid.
   */
  #guarded(req: RequestInfo, route: () => Promise<DemoAnswer>): Promise<DemoAnswer> {
    if (!isSameOrigin(req))
      throw new ProtocolError("forbidden", "the demo routes take same-origin requests only");
    if (!/^application\/json(;|$)/i.test(req.headers["content-type"] ?? ""))
      throw new ProtocolError("forbidden", "the demo routes take content-type: application/json only");
    return route();
  }

  async #counter(body: unknown): Promise<DemoAnswer> {
    if (typeof body !== "object" || body === null || Array.isArray(body))
      throw new ProtocolError("invalid_body", 'body must be {"counter","action"}');
    const { page, counter, action, id } = body as Record<string, unknown>;
    if (page !== undefined && page !== this.#o.page)
      throw new ProtocolError("forbidden", `the demo route only changes page ${this.#o.page}`);
    if (action !== "increment" && action !== "reset")
      throw new ProtocolError("invalid_body", 'action must be "increment" or "reset"');
    const allowed =
      typeof counter === "string" && Object.hasOwn(DEMO_COUNTERS, counter) ? DEMO_COUNTERS[counter] : [];
    if (!allowed?.includes(action))
      throw new ProtocolError(
        "forbidden",
        `the demo route does not ${action} ${String(counter).slice(0, 64)}`,
      );
    if (id !== undefined && !isIdempotencyKey(id)) throw new ProtocolError("invalid_idempotency_key");
    return this.#apply(counter as string, action, id);
  }

  /**
   * Applies the change through the SDK, within the demo's budget: exactly once by `id` (the
   * browser's, so its retries are safe too).
   */
  async #apply(counter: string, action: DemoAction, id: string | undefined): Promise<DemoAnswer> {
    const client = this.#client;
    if (client === undefined) throw new ProtocolError("unavailable", "the demo is starting");
    const retryAfterS = takeTokens(this.#bucket, 1, this.#o.budget, this.#o.now());
    if (retryAfterS > 0)
      throw new RateLimitedError(retryAfterS, `the demo is busy; retry in ${retryAfterS} s`);
    const options = id !== undefined ? { idempotencyKey: id } : {};
    let result: CounterValue;
    try {
      result =
        action === "increment"
          ? await client.increment(this.#o.page, counter, 1, options)
          : await client.reset(this.#o.page, counter, options);
    } catch (err) {
      throw toProtocolError(err);
    }
    return {
      status: 200,
      body: { page: result.page, counter: result.counter, value: result.value, updated_at: result.updatedAt },
    };
  }
}

type DemoAnswer = { status: number; body: unknown };

/**
 * A request from a page of this very origin: browsers say so in Sec-Fetch-Site; older ones send an
 * Origin, which must name the host the request was sent to. A request with neither is refused: it
 * is not the demo page's.
 */
function isSameOrigin(req: RequestInfo): boolean {
  const site = req.headers["sec-fetch-site"];
  if (site !== undefined) return site === "same-origin";
  const origin = req.headers.origin;
  if (origin === undefined || !URL.canParse(origin)) return false;
  return new URL(origin).host === req.headers.host;
}

/**
 * The browser gets the gateway's code back, except for our own key being refused: that is this
 * server's misconfiguration, not the browser's fault, so it is an internal error (and logged).
 */
function toProtocolError(err: unknown): ProtocolError {
  if (err instanceof LivecountError && !(err instanceof AuthError) && isErrorCode(err.code))
    return new ProtocolError(err.code, err.message, { cause: err });
  if (err instanceof LivecountError && err.retryable)
    return new ProtocolError("unavailable", "the gateway did not answer", { cause: err });
  return new ProtocolError("internal", undefined, { cause: err });
}
