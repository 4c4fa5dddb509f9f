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
 */
import type { HttpRoute } from "@livecount/gateway";
import { ProtocolError, isErrorCode, isIdempotencyKey } from "@livecount/protocol";
import type { Logger } from "@livecount/runtime";
import { AuthError, LivecountClient, LivecountError, type CounterValue } from "@livecount/sdk";

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
  /** Per-try timeout of the SDK's requests to the gateway, in ms. Default 5000. */
  readonly timeoutMs?: number;
}

/** The routes and the SDK client behind them; `connect` once the gateway listens. */
export class DemoRoutes {
  readonly routes: ReadonlyMap<string, HttpRoute>;
  readonly #o: DemoRoutesOptions;
  #client: LivecountClient | undefined;

  constructor(options: DemoRoutesOptions) {
    this.#o = options;
    this.routes = new Map<string, HttpRoute>([
      ["/demo/counter", (body) => this.#counter(body)],
      ["/demo/like", () => this.#apply("likes", "increment", undefined)],
    ]);
  }

  /** Points the SDK at the gateway (`http://127.0.0.1:<port>`) with a configured publisher key. */
  connect(baseUrl: string, publisherKey: string): void {
    this.#client = new LivecountClient({
      baseUrl,
      publisherKey,
      timeoutMs: this.#o.timeoutMs ?? 5000,
      onError: (err) => this.#o.logger.warn({ err }, "demo client error"),
    });
  }

  async close(): Promise<void> {
    const client = this.#client;
    this.#client = undefined;
    await client?.close();
  }

  async #counter(body: unknown): Promise<{ status: number; body: unknown }> {
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

  /** Applies the change through the SDK: exactly once by `id` (the browser's, so its retries are safe too). */
  async #apply(
    counter: string,
    action: DemoAction,
    id: string | undefined,
  ): Promise<{ status: number; body: unknown }> {
    const client = this.#client;
    if (client === undefined) throw new ProtocolError("unavailable", "the demo is starting");
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
