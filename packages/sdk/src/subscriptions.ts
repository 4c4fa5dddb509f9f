/**
 * Live values over protocol v1's WebSocket: one socket per client, shared by every subscription,
 * opened on the first subscribe and closed after the last unsubscribe. A dropped socket is
 * reopened with full-jitter backoff and every page is joined or watched again; an application
 * ping finds a connection that died silently. The socket offers the `livecount.counts`
 * subprotocol, so a window's changes of all its pages come in one `counts` frame; `count` frames
 * (from a gateway that predates them) are read the same.
 */
import { reconnectDelayMs } from "./backoff.js";
import { LivecountError, errorFromCode } from "./errors.js";
import { countUpdate, countsUpdates, notify, parseFrame, reportToPage, safely } from "./live_updates.js";
import type { CountUpdate } from "./types.js";

/** Bivariant callback parameter, so both DOM's WebSocket and the `ws` package's fit. */
type Handler<E> = { bivarianceHack(event: E): void }["bivarianceHack"];

/** How long a page refused as `rate_limited` waits at least before it is asked for again. */
const RETRY_REFUSED_MS = 1_000;
/** The subprotocol that asks the gateway for `counts` frames (docs/protocol.md). */
const COUNTS_SUBPROTOCOL = "livecount.counts";

/** What the SDK needs of a WebSocket: the browser's, Node 22's global, or the `ws` package's. */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: Handler<unknown> | null;
  onmessage: Handler<{ readonly data: unknown }> | null;
  onclose: Handler<{ readonly code: number; readonly reason: string }> | null;
  onerror: Handler<unknown> | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** Called with the URL and the subprotocols to offer (`["livecount.counts"]`). */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

export type CountListener = (update: CountUpdate) => void;

export interface SubscribeOptions {
  /**
   * `"watch"` (default) receives the page's values without counting as a viewer; `"join"` also
   * counts this client as a viewer of the page while subscribed.
   */
  readonly mode?: "watch" | "join";
  /**
   * With `"join"`: the viewer id (1..128 printable ASCII). Subscriptions sharing a viewer id,
   * on any socket, count once. Default: the socket is its own viewer. When several of a client's
   * subscriptions join one page, the socket joins once, as the first one's viewer.
   */
  readonly viewer?: string;
  /**
   * A join token for a private page (see `signJoinToken`), sent with the join or watch; with a
   * token the server counts its `sub` as the viewer, whatever `viewer` says.
   */
  readonly token?: string;
  /** Errors the server reports for this page (e.g. `too_many_pages`). Default: the client's `onError`. */
  readonly onError?: (error: LivecountError) => void;
}

export interface ReconnectOptions {
  /** Cap of the first reconnect delay, in milliseconds; doubles per failed try. Default 250. */
  readonly baseMs?: number;
  /** Largest reconnect delay, in milliseconds. Default 10000. */
  readonly maxMs?: number;
  /**
   * How often, in milliseconds, the client pings the server; a socket that answers nothing for
   * a whole interval is dropped and reopened. Default 25000.
   */
  readonly pingIntervalMs?: number;
  /**
   * With `transport: "sse"` read over fetch (no EventSource): a stream on which nothing arrives,
   * not even the server's heartbeat comment, for this long, in milliseconds, is dropped and
   * reopened. Default 45000, three of the server's default heartbeats (LIVECOUNT_SSE_HEARTBEAT_S
   * 15). EventSource hides heartbeats from the page, so it cannot tell.
   */
  readonly idleMs?: number;
}

export const RECONNECT_DEFAULTS = Object.freeze({
  baseMs: 250,
  maxMs: 10_000,
  pingIntervalMs: 25_000,
  idleMs: 45_000,
});

/** How the client keeps live values: over the WebSocket (Subscriptions) or event streams (event_streams.ts). */
export interface LiveValues {
  subscribe(page: string, listener: CountListener, options: SubscribeOptions): () => void;
  /** Closes every connection for good; listeners hear nothing more. */
  close(): void;
  /** Connections opened so far (the first ones plus reconnects); for diagnostics and tests. */
  readonly connects: number;
}

/** WebSocket readyState OPEN. */
const OPEN = 1;
/** Normal closure (RFC 6455). */
const CLOSE_NORMAL = 1000;

interface Subscription {
  readonly listener: CountListener;
  readonly mode: "watch" | "join";
  readonly viewer: string | undefined;
  readonly token: string | undefined;
  readonly onError: ((error: LivecountError) => void) | undefined;
}

/** What this socket has told the server about a page. */
type Sent =
  | { readonly kind: "none" }
  | { readonly kind: "watch"; readonly token?: string }
  | { readonly kind: "join"; readonly viewer?: string; readonly token?: string };

interface PageState {
  readonly subs: Set<Subscription>;
  sent: Sent;
  last: CountUpdate | undefined;
  /** Refused as `too_many_pages` on this socket: asked for again once another page leaves it. */
  refused?: boolean;
  /** `#leaves` when its join or watch went out: a leave after it made room before the refusal came. */
  askedAt?: number;
}

export interface SubscriptionsOptions {
  readonly url: string;
  readonly WebSocket: WebSocketConstructor | undefined;
  readonly reconnect: Required<ReconnectOptions>;
  readonly onError: (error: LivecountError) => void;
}

export class Subscriptions implements LiveValues {
  readonly #o: SubscriptionsOptions;
  readonly #pages = new Map<string, PageState>();
  #ws: WebSocketLike | undefined;
  /** Tries since the last socket the server answered on; drives the backoff. */
  #failures = 0;
  /** When the current outage began: the first reconnect after a socket the server answered on. */
  #downSince = 0;
  #reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  #pingTimer: ReturnType<typeof setInterval> | undefined;
  /** Pages refused as `rate_limited` (too many new pages from this address), asked for again soon. */
  readonly #retries = new Set<ReturnType<typeof setTimeout>>();
  /** Leaves and unwatches sent so far (see PageState.askedAt). */
  #leaves = 0;
  /** A ping was sent and nothing has arrived since. */
  #awaitingPong = false;
  #closed = false;
  /** Sockets opened so far; for diagnostics and tests. */
  connects = 0;

  constructor(options: SubscriptionsOptions) {
    this.#o = options;
  }

  subscribe(page: string, listener: CountListener, options: SubscribeOptions): () => void {
    if (this.#o.WebSocket === undefined)
      throw new LivecountError(
        "websocket_unavailable",
        "no WebSocket implementation: pass one as the WebSocket option (e.g. the ws package's on Node < 22)",
        { retryable: false },
      );
    const sub: Subscription = {
      listener,
      mode: options.mode ?? "watch",
      viewer: options.viewer,
      token: options.token,
      onError: options.onError,
    };
    let state = this.#pages.get(page);
    if (state === undefined)
      this.#pages.set(page, (state = { subs: new Set(), sent: { kind: "none" }, last: undefined }));
    state.subs.add(sub);
    const known = state.last;
    // A page already live hands its latest value to the newcomer right away.
    if (known !== undefined) queueMicrotask(() => state.subs.has(sub) && this.#call(sub, known));
    this.#sync(page);
    if (this.#ws === undefined && this.#reconnectTimer === undefined) this.#connect();
    let subscribed = true;
    return () => {
      if (!subscribed) return;
      subscribed = false;
      state.subs.delete(sub);
      this.#sync(page);
      if (this.#pages.size === 0) this.#disconnect();
    };
  }

  /** Closes the socket for good; listeners hear nothing more. */
  close(): void {
    this.#closed = true;
    for (const timer of this.#retries) clearTimeout(timer);
    this.#retries.clear();
    this.#pages.clear();
    this.#disconnect();
  }

  #connect(): void {
    this.#reconnectTimer = undefined;
    if (this.#closed || this.#pages.size === 0) return;
    let ws: WebSocketLike;
    try {
      ws = new this.#o.WebSocket!(this.#o.url, [COUNTS_SUBPROTOCOL]);
    } catch (err) {
      this.#report(errorFromCode("network_error", `cannot open ${this.#o.url}`, { cause: err }));
      this.#scheduleReconnect();
      return;
    }
    this.#ws = ws;
    this.connects++;
    ws.onopen = () => {
      for (const state of this.#pages.values()) {
        state.sent = { kind: "none" };
        state.refused = false;
      }
      for (const page of [...this.#pages.keys()]) this.#sync(page);
      this.#awaitingPong = false;
      this.#pingTimer = setInterval(() => this.#heartbeat(), this.#o.reconnect.pingIntervalMs);
    };
    ws.onmessage = (event) => {
      this.#awaitingPong = false;
      this.#failures = 0;
      if (typeof event.data === "string") this.#receive(event.data);
    };
    ws.onclose = () => this.#lost(ws);
    // An error is always followed by a close, which reconnects.
    ws.onerror = () => {};
  }

  /** The socket `ws` is gone (closed by the server, the network, or a failed heartbeat). */
  #lost(ws: WebSocketLike): void {
    if (this.#ws !== ws) return;
    detach(ws);
    this.#ws = undefined;
    clearInterval(this.#pingTimer);
    this.#pingTimer = undefined;
    for (const state of this.#pages.values()) state.sent = { kind: "none" };
    this.#scheduleReconnect();
  }

  #scheduleReconnect(): void {
    if (this.#closed || this.#pages.size === 0 || this.#reconnectTimer !== undefined) return;
    const { baseMs, maxMs } = this.#o.reconnect;
    const now = Date.now();
    if (this.#failures === 0) this.#downSince = now;
    const delayMs = reconnectDelayMs(this.#failures++, now - this.#downSince, baseMs, maxMs);
    this.#reconnectTimer = setTimeout(() => this.#connect(), delayMs);
  }

  #disconnect(): void {
    clearTimeout(this.#reconnectTimer);
    this.#reconnectTimer = undefined;
    clearInterval(this.#pingTimer);
    this.#pingTimer = undefined;
    const ws = this.#ws;
    this.#ws = undefined;
    if (ws !== undefined) {
      detach(ws);
      try {
        ws.close(CLOSE_NORMAL);
      } catch {
        // already closing
      }
    }
  }

  #heartbeat(): void {
    const ws = this.#ws;
    if (ws === undefined) return;
    // Nothing for a whole interval: the connection died without a close.
    if (this.#awaitingPong) return this.#startOver(ws);
    this.#awaitingPong = true;
    this.#send({ type: "ping" });
  }

  /** Closes `ws` and opens a new socket, which subscribes every page again from scratch. */
  #startOver(ws: WebSocketLike): void {
    try {
      ws.close(CLOSE_NORMAL);
    } catch {
      // already closing
    }
    this.#lost(ws);
  }

  /** Brings what the server knows about `page` in line with its subscriptions. */
  #sync(page: string): void {
    const state = this.#pages.get(page);
    if (state === undefined) return;
    if (state.subs.size === 0) this.#pages.delete(page);
    if (this.#ws?.readyState !== OPEN) return;
    const want = desired(state.subs);
    const sent = state.sent;
    if (want.kind === "none") {
      if (sent.kind === "none") return;
      this.#send({ type: sent.kind === "join" ? "leave" : "unwatch", page });
      this.#leaves++;
      state.sent = want;
      // Room on the socket now for the pages it refused.
      for (const [other, s] of this.#pages)
        if (s.refused === true) {
          s.refused = false;
          this.#sync(other);
        }
      return;
    }
    if (state.refused === true) return;
    state.askedAt = this.#leaves;
    if (want.kind === "watch") {
      if (sent.kind === "join") this.#send({ type: "leave", page });
      if (sent.kind !== "watch" || sent.token !== want.token)
        this.#send({ type: "watch", page, ...tokenField(want.token) });
    } else if (sent.kind !== "join" || sent.viewer !== want.viewer || sent.token !== want.token) {
      const viewer: { viewer?: string } = want.viewer === undefined ? {} : { viewer: want.viewer };
      this.#send({ type: "join", page, ...viewer, ...tokenField(want.token) });
    }
    state.sent = want;
  }

  #send(frame: Record<string, string>): void {
    try {
      this.#ws?.send(JSON.stringify(frame));
    } catch {
      // The socket is closing; its close event reconnects and resends.
    }
  }

  #receive(text: string): void {
    const f = parseFrame(text);
    if (f === undefined) return;
    if (f.type === "count") this.#update(countUpdate(f));
    else if (f.type === "counts") for (const update of countsUpdates(f)) this.#update(update);
    else if (f.type === "error" && typeof f.code === "string") {
      const page = typeof f.page === "string" ? f.page : undefined;
      const error = errorFromCode(f.code, typeof f.message === "string" ? f.message : f.code, {
        ...(page !== undefined ? { page } : {}),
      });
      const state = page !== undefined ? this.#pages.get(page) : undefined;
      // Frames past the socket's budget, refused without naming a page: which joins or leaves went
      // through is unknown, and a new socket starts from the subscriptions.
      if (page === undefined && f.code === "rate_limited" && this.#ws !== undefined)
        this.#startOver(this.#ws);
      // Refused for want of room on the socket: asked for again once another page leaves it.
      if (state !== undefined && f.code === "too_many_pages") {
        state.sent = { kind: "none" };
        state.refused = state.askedAt === this.#leaves;
        if (!state.refused) this.#sync(page!);
      }
      // Refused for now, not for good: the server did not take the join or watch; ask again in
      // 1 to 4 s (spread, so clients behind one address do not come back together).
      if (state !== undefined && f.code === "rate_limited") {
        state.sent = { kind: "none" };
        const timer = setTimeout(
          () => {
            this.#retries.delete(timer);
            if (!this.#closed) this.#sync(page!);
          },
          RETRY_REFUSED_MS * (1 + Math.random() * 3),
        );
        this.#retries.add(timer);
      }
      reportToPage(state?.subs ?? [], error, (e) => this.#report(e));
    }
  }

  /** A page's new value, to its subscriptions. */
  #update(update: CountUpdate | undefined): void {
    const state = update !== undefined ? this.#pages.get(update.page) : undefined;
    if (update === undefined || state === undefined) return;
    // After a reconnect the first frame may repeat the last value; listeners may see it twice.
    state.last = update;
    for (const sub of [...state.subs]) this.#call(sub, update);
  }

  #call(sub: Subscription, update: CountUpdate): void {
    notify(sub.listener, update, (e) => this.#report(e));
  }

  #report(error: LivecountError): void {
    safely(() => this.#o.onError(error));
  }
}

/** The subscription the server should have for a page: join if any subscriber joins, else watch. */
function desired(subs: ReadonlySet<Subscription>): Sent {
  if (subs.size === 0) return { kind: "none" };
  let token: string | undefined;
  for (const s of subs) token ??= s.token;
  for (const s of subs)
    if (s.mode === "join")
      return {
        kind: "join",
        ...(s.viewer === undefined ? {} : { viewer: s.viewer }),
        ...tokenField(token),
      };
  return { kind: "watch", ...tokenField(token) };
}

function tokenField(token: string | undefined): { token?: string } {
  return token === undefined ? {} : { token };
}

function detach(ws: WebSocketLike): void {
  ws.onopen = null;
  ws.onmessage = null;
  ws.onclose = null;
  // Keep swallowing errors: a socket still closing may emit one, and `ws` throws unhandled ones.
  ws.onerror = () => {};
}
