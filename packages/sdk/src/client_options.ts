/** What a `LivecountClient` is configured with, and the options of its calls. */
import type { RetryOptions } from "./backoff.js";
import type { QueueOptions } from "./change_queue.js";
import type { LivecountError } from "./errors.js";
import type { EventSourceConstructor } from "./event_streams.js";
import type { ReconnectOptions, WebSocketConstructor } from "./subscriptions.js";
import type { FetchFn, RetryListener } from "./transport.js";

export interface LivecountClientOptions {
  /** The gateway, e.g. `https://livecount.example.com` (a path prefix is kept; WebSocket at `<baseUrl>/ws`). */
  readonly baseUrl: string;
  /**
   * Publisher key, sent as `Authorization: Bearer <key>` with every change and read. Reads need
   * none, but with it they spend no per-address read budget and see private pages; prefix
   * listings need it (or the admin key); subscriptions never send it. It is a secret: keep it on your servers, never ship it to browsers.
   */
  readonly publisherKey?: string;
  /** fetch implementation. Default: the global one (Node >= 18, browsers). */
  readonly fetch?: FetchFn;
  /**
   * How `subscribe()` gets live values: `"websocket"` (default), one socket for every subscription,
   * which can also count the client as a viewer; or `"sse"`, one Server-Sent Events stream per page
   * (`GET /v1/pages/{page}/events`), for networks that do not pass WebSockets. Event streams only
   * watch: `mode: "join"` needs the WebSocket.
   */
  readonly transport?: "websocket" | "sse";
  /**
   * WebSocket constructor for `subscribe()`. Default: the global one (browsers, Node >= 22). On
   * Node 20 pass the `ws` package's: `import WebSocket from "ws"`.
   */
  readonly WebSocket?: WebSocketConstructor;
  /**
   * EventSource constructor for `transport: "sse"`. Default: the global one (browsers). Without
   * one, streams are read over `fetch`.
   */
  readonly EventSource?: EventSourceConstructor;
  /** How long one HTTP try may take before it is abandoned (and retried), in milliseconds. Default 10000. */
  readonly timeoutMs?: number;
  /** Retries of failed requests: tries in all and full-jitter backoff bounds. Default `{ attempts: 6, baseMs: 100, maxMs: 5000 }`. */
  readonly retry?: Partial<RetryOptions>;
  /** The fire-and-forget queue: coalescing window, batch size, bounds. See {@link QueueOptions}. */
  readonly queue?: QueueOptions;
  /** WebSocket reconnect backoff and heartbeat. See {@link ReconnectOptions}. */
  readonly reconnect?: ReconnectOptions;
  /**
   * Errors nobody awaits: queued changes that failed for good (a {@link PartialFailureError}
   * listing them with their keys), errors the server sends on the socket, throwing listeners.
   * Default: `console.error`.
   */
  readonly onError?: (error: LivecountError) => void;
  /** Called before each retry of an HTTP request (for logging). */
  readonly onRetry?: RetryListener;
}

/** Options of a single change. */
export interface ChangeOptions {
  /**
   * The change's idempotency key (1..128 printable ASCII): a change sent again with the same key
   * never counts twice (for the server's key TTL, 24 h by default). Derive it from your own event
   * id (`like:${userId}:${postId}`) to make the change exactly-once across your own retries
   * and restarts too. Default: a random UUID, reused by every retry of this call.
   */
  readonly idempotencyKey?: string;
  readonly signal?: AbortSignal;
}

export interface ReadOptions {
  readonly signal?: AbortSignal;
}

export interface ListOptions extends ReadOptions {
  /** Pages per answer, 1..100. Default: the server's (100). */
  readonly limit?: number;
  /** The `cursor` of the previous answer, to continue after it. */
  readonly cursor?: string;
}
