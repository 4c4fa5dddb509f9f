/**
 * Live values over Server-Sent Events (`GET /v1/pages/{page}/events`, `transport: "sse"`): one
 * stream per page, shared by the page's subscriptions, opened on its first subscribe and closed
 * after its last unsubscribe. Browsers read it with their EventSource; elsewhere (Node) the stream
 * is read over fetch and parsed here. A stream that fails, ends or goes silent is reopened with the
 * client's full-jitter backoff (no sooner than a refusal's Retry-After). A stream only watches:
 * counting as a viewer (`mode: "join"`) needs the WebSocket.
 */
import { parseRetryAfter, reconnectDelayMs } from "./backoff.js";
import { LivecountError, errorFromCode } from "./errors.js";
import { countUpdate, notify, parseFrame, reportToPage } from "./live_updates.js";
import {
  type CountListener,
  type LiveValues,
  type ReconnectOptions,
  type SubscribeOptions,
} from "./subscriptions.js";
import { SseParser } from "./sse_parser.js";
import type { FetchFn } from "./transport.js";
import type { CountUpdate } from "./types.js";

/** What the SDK needs of an EventSource: the browser's, or any with the same shape. */
export interface EventSourceLike {
  onerror: ((event: unknown) => void) | null;
  addEventListener(type: "count", listener: (event: { readonly data: unknown }) => void): void;
  close(): void;
}

export type EventSourceConstructor = new (url: string) => EventSourceLike;

export interface EventStreamsOptions {
  /** The gateway, without a trailing slash. */
  readonly baseUrl: string;
  /** Reads streams when there is no EventSource. */
  readonly fetch: FetchFn;
  readonly EventSource: EventSourceConstructor | undefined;
  readonly reconnect: Required<ReconnectOptions>;
  readonly onError: (error: LivecountError) => void;
}

interface Subscription {
  readonly listener: CountListener;
  readonly token: string | undefined;
  readonly onError: ((error: LivecountError) => void) | undefined;
}

interface PageStream {
  readonly subs: Set<Subscription>;
  last: CountUpdate | undefined;
  /** Tries since the last event; drives the backoff. */
  failures: number;
  /** When the current outage began: the first retry after an event. */
  downSince: number;
  /** Closes the open connection, if any; closed so, it does not reconnect. */
  close: (() => void) | undefined;
  /** The token the open connection was opened with. */
  token: string | undefined;
  reconnectTimer: ReturnType<typeof setTimeout> | undefined;
}

export class EventStreams implements LiveValues {
  readonly #o: EventStreamsOptions;
  readonly #pages = new Map<string, PageStream>();
  #closed = false;
  connects = 0;

  constructor(options: EventStreamsOptions) {
    this.#o = options;
  }

  subscribe(page: string, listener: CountListener, options: SubscribeOptions): () => void {
    if (options.mode === "join")
      throw new LivecountError(
        "join_needs_websocket",
        'an event stream only watches: subscribe with mode "join" over the WebSocket transport',
        { retryable: false, page },
      );
    const sub: Subscription = { listener, token: options.token, onError: options.onError };
    let state = this.#pages.get(page);
    if (state === undefined) {
      state = {
        subs: new Set(),
        last: undefined,
        failures: 0,
        downSince: 0,
        close: undefined,
        token: undefined,
        reconnectTimer: undefined,
      };
      this.#pages.set(page, state);
    }
    const s = state;
    s.subs.add(sub);
    const known = s.last;
    // A page already live hands its latest value to the newcomer right away.
    if (known !== undefined) queueMicrotask(() => s.subs.has(sub) && this.#call(sub, known));
    // Not connected nor waiting to (new, or refused for good), or a token the stream lacks: open.
    const idle = s.close === undefined && s.reconnectTimer === undefined;
    if (idle || s.token !== tokenOf(s.subs)) this.#open(page, s);
    let subscribed = true;
    return () => {
      if (!subscribed) return;
      subscribed = false;
      s.subs.delete(sub);
      if (s.subs.size > 0 || this.#pages.get(page) !== s) return;
      this.#pages.delete(page);
      this.#stop(s);
    };
  }

  close(): void {
    this.#closed = true;
    for (const state of this.#pages.values()) this.#stop(state);
    this.#pages.clear();
  }

  /** (Re)opens the page's stream, closing the one it had. */
  #open(page: string, state: PageStream): void {
    this.#stop(state);
    if (this.#closed || this.#pages.get(page) !== state) return;
    state.token = tokenOf(state.subs);
    const query = state.token === undefined ? "" : `?token=${encodeURIComponent(state.token)}`;
    const url = `${this.#o.baseUrl}/v1/pages/${encodeURIComponent(page)}/events${query}`;
    this.connects++;
    if (this.#o.EventSource !== undefined) this.#viaEventSource(page, state, url);
    else void this.#viaFetch(page, state, url);
  }

  /**
   * The browser's EventSource. It reconnects by itself after a network error, but not after an
   * error status, and never with backoff: every error closes it and the client's backoff reopens.
   */
  #viaEventSource(page: string, state: PageStream, url: string): void {
    const source = new this.#o.EventSource!(url);
    let stopped = false;
    state.close = () => {
      stopped = true;
      source.close();
    };
    source.addEventListener("count", (event) => {
      if (!stopped && typeof event.data === "string") this.#receive(page, state, event.data);
    });
    source.onerror = () => {
      if (!stopped) this.#retry(page, state, 0);
    };
  }

  /**
   * A reader of the stream over fetch. A refusal is reported to the page's subscriptions; one that
   * may pass later (`rate_limited`, `unavailable`) is tried again, no sooner than its Retry-After,
   * the others not until another subscribe. A stream that ends, is cut, or says nothing (not even a
   * heartbeat) for `idleMs` is opened again.
   */
  async #viaFetch(page: string, state: PageStream, url: string): Promise<void> {
    const controller = new AbortController();
    let stopped = false;
    let idle: ReturnType<typeof setTimeout> | undefined;
    const heard = (): void => {
      clearTimeout(idle);
      idle = setTimeout(() => controller.abort(), this.#o.reconnect.idleMs);
    };
    state.close = () => {
      stopped = true;
      clearTimeout(idle);
      controller.abort();
    };
    let retryAfterMs = 0;
    try {
      heard();
      const fetchFn = this.#o.fetch;
      const res = await fetchFn(url, { headers: { accept: "text/event-stream" }, signal: controller.signal });
      const type = res.headers.get("content-type") ?? "";
      if (res.ok && res.body !== null && type.startsWith("text/event-stream"))
        await this.#read(page, state, res.body, heard, () => stopped);
      else {
        const error = await refusal(res, page);
        if (stopped) return;
        reportToPage(state.subs, error, this.#o.onError);
        if (!error.retryable) return this.#stop(state);
        retryAfterMs = error.retryAfterMs ?? 0;
      }
    } catch {
      // No answer, cut, or silent too long: retried below like an end.
    } finally {
      clearTimeout(idle);
    }
    if (!stopped) this.#retry(page, state, retryAfterMs);
  }

  async #read(
    page: string,
    state: PageStream,
    body: ReadableStream<Uint8Array>,
    heard: () => void,
    stopped: () => boolean,
  ): Promise<void> {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    const parser = new SseParser();
    for (;;) {
      const { done, value } = await reader.read();
      if (done || stopped()) return;
      heard();
      for (const event of parser.push(decoder.decode(value, { stream: true })))
        if (event.event === "count") this.#receive(page, state, event.data);
    }
  }

  #receive(page: string, state: PageStream, data: string): void {
    const frame = parseFrame(data);
    const update = frame !== undefined ? countUpdate(frame) : undefined;
    if (update === undefined || update.page !== page) return;
    state.failures = 0;
    state.last = update;
    for (const sub of [...state.subs]) this.#call(sub, update);
  }

  /** The connection is lost: reopen after the backoff, no sooner than `minMs`. */
  #retry(page: string, state: PageStream, minMs: number): void {
    this.#stop(state);
    if (this.#closed || this.#pages.get(page) !== state) return;
    const { baseMs, maxMs } = this.#o.reconnect;
    const now = Date.now();
    if (state.failures === 0) state.downSince = now;
    const delay = Math.max(minMs, reconnectDelayMs(state.failures++, now - state.downSince, baseMs, maxMs));
    state.reconnectTimer = setTimeout(() => {
      state.reconnectTimer = undefined;
      this.#open(page, state);
    }, delay);
  }

  #stop(state: PageStream): void {
    clearTimeout(state.reconnectTimer);
    state.reconnectTimer = undefined;
    const close = state.close;
    state.close = undefined;
    close?.();
  }

  #call(sub: Subscription, update: CountUpdate): void {
    notify(sub.listener, update, this.#o.onError);
  }
}

/** The token a page's stream is opened with: the first subscription's that has one. */
function tokenOf(subs: ReadonlySet<Subscription>): string | undefined {
  for (const s of subs) if (s.token !== undefined) return s.token;
  return undefined;
}

/** The error a refused stream answered with (protocol v1's error body), with its Retry-After. */
async function refusal(res: Response, page: string): Promise<LivecountError> {
  if (res.ok)
    return new LivecountError(
      "bad_response",
      `the event stream answered ${res.headers.get("content-type")}`,
      {
        status: res.status,
        page,
        retryable: true,
      },
    );
  const retryAfterMs = parseRetryAfter(res.headers.get("retry-after"));
  let body: { error?: { code?: unknown; message?: unknown } } | undefined;
  try {
    body = (await res.json()) as typeof body;
  } catch {
    body = undefined;
  }
  const code = typeof body?.error?.code === "string" ? body.error.code : "http_error";
  const message = typeof body?.error?.message === "string" ? body.error.message : `HTTP ${res.status}`;
  return errorFromCode(code, message, {
    status: res.status,
    page,
    ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
  });
}
