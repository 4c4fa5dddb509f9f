import {
  ProtocolError,
  decodeClientFrame,
  encodeServerFrame,
  type ClientFrame,
  type CountFrame,
  type Encoding,
  type ErrorCode,
} from "@livecount/protocol";
import type { Clock } from "@livecount/runtime";
import type { WebSocket } from "uWebSockets.js";
import type { GatewayMetrics } from "./gateway_metrics.js";
import type { LocalPresence } from "./local_presence.js";
import type { PageViews } from "./page_views.js";
import type { PresenceForwarder } from "./presence_forwarder.js";

/** What a socket sees on one page: watching it, and, when joined, counting as `viewer`. */
interface PageMembership {
  /** Namespaced viewer key when the socket joined; undefined when it only watches. */
  viewer: string | undefined;
  readonly topic: string;
}

/** Per-socket state, kept in uWS user data. */
export interface SocketData {
  readonly id: number;
  readonly pages: Map<string, PageMembership>;
  /** Token bucket for the frame rate limit. */
  tokens: number;
  refilledAt: number;
  /** Frames dropped for the rate limit; past a limit the socket is closed. */
  violations: number;
}

export type Socket = WebSocket<SocketData>;

export interface SocketRouterOptions {
  readonly presence: LocalPresence;
  readonly forwarder: PresenceForwarder;
  readonly views: PageViews;
  readonly metrics: GatewayMetrics;
  readonly clock: Clock;
  /** This gateway's incarnation, part of the viewer key of sockets that name no viewer. */
  readonly incarnation: string;
  readonly maxPagesPerSocket: number;
  readonly ratePerS: number;
  readonly burst: number;
}

/** WebSocket close code for policy violations (RFC 6455). */
const CLOSE_POLICY_VIOLATION = 1008;
/** A socket that keeps sending past its rate limit this many times is closed. */
const MAX_RATE_VIOLATIONS = 100;

/** The topic count frames of `page` are published on for sockets speaking `encoding`. */
export function topicOf(page: string, encoding: Encoding): string {
  return (encoding === "json" ? "j:" : "m:") + page;
}

/**
 * Decodes client frames and routes them: presence to the local presence and its forwarder, watches
 * to the page views, frames back through uWS topics. It owns no presence logic of its own.
 */
export class SocketRouter {
  readonly #o: SocketRouterOptions;
  readonly #open = new Set<Socket>();
  #nextId = 1;

  constructor(options: SocketRouterOptions) {
    this.#o = options;
  }

  newSocketData(): SocketData {
    return {
      id: this.#nextId++,
      pages: new Map(),
      tokens: this.#o.burst,
      refilledAt: this.#o.clock.now(),
      violations: 0,
    };
  }

  open(ws: Socket): void {
    this.#open.add(ws);
    this.#o.metrics.sockets.inc();
    this.#o.metrics.socketsOpened.inc();
  }

  message(ws: Socket, data: ArrayBuffer, isBinary: boolean): void {
    const state = ws.getUserData();
    const encoding: Encoding = isBinary ? "msgpack" : "json";
    if (!this.#takeToken(state)) {
      if (++state.violations >= MAX_RATE_VIOLATIONS) {
        this.#o.metrics.socketsClosed.inc({ reason: "rate_limited" });
        ws.end(CLOSE_POLICY_VIOLATION, "rate limit exceeded");
      } else this.#error(ws, encoding, "rate_limited");
      return;
    }
    let frame: ClientFrame;
    try {
      frame = decodeClientFrame(data, encoding);
    } catch (err) {
      const code = err instanceof ProtocolError ? err.code : "bad_frame";
      this.#error(ws, encoding, code, err instanceof Error ? err.message : undefined);
      return;
    }
    this.#o.metrics.framesIn.inc({ type: frame.type });
    switch (frame.type) {
      case "ping":
        ws.send(encodeServerFrame({ type: "pong" }, encoding), isBinary);
        return;
      case "join":
        return this.#join(ws, encoding, frame.page, frame.viewer);
      case "watch":
        return this.#watch(ws, encoding, frame.page);
      case "leave":
        return this.#leave(ws, frame.page, true);
      case "unwatch":
        return this.#leave(ws, frame.page, false);
    }
  }

  /** The socket is gone (closed by either side or timed out): everything it held is released. */
  close(ws: Socket, code: number): void {
    this.#open.delete(ws);
    const state = ws.getUserData();
    for (const [page, m] of state.pages) this.#release(page, m);
    state.pages.clear();
    this.#o.metrics.sockets.dec();
    this.#o.metrics.socketsClosed.inc({ reason: code === 1000 || code === 1001 ? "normal" : String(code) });
    this.#gauges();
  }

  /** Ends every open socket with a close frame (shutdown: clients reconnect to another gateway). */
  endAll(code: number, reason: string): void {
    for (const ws of [...this.#open]) ws.end(code, reason);
  }

  #join(ws: Socket, encoding: Encoding, page: string, viewer: string | undefined): void {
    const state = ws.getUserData();
    // Client ids and socket ids live in separate namespaces, so no client can claim a socket's id.
    const key = viewer !== undefined ? `v:${viewer}` : `s:${this.#o.incarnation}:${state.id}`;
    const existing = state.pages.get(page);
    if (existing !== undefined) {
      if (existing.viewer === key) return;
      if (existing.viewer !== undefined) this.#removeViewer(page, existing.viewer);
      existing.viewer = key;
      this.#addViewer(page, key);
      return;
    }
    if (!this.#subscribe(ws, encoding, page, key)) return;
    this.#addViewer(page, key);
  }

  #watch(ws: Socket, encoding: Encoding, page: string): void {
    if (ws.getUserData().pages.has(page)) return;
    this.#subscribe(ws, encoding, page, undefined);
  }

  /** `leave` undoes a join; `unwatch` undoes a watch. Either one for what the socket does not have is a no-op. */
  #leave(ws: Socket, page: string, joined: boolean): void {
    const state = ws.getUserData();
    const m = state.pages.get(page);
    if (m === undefined || (m.viewer !== undefined) !== joined) return;
    state.pages.delete(page);
    ws.unsubscribe(m.topic);
    this.#release(page, m);
    this.#gauges();
  }

  #subscribe(ws: Socket, encoding: Encoding, page: string, viewer: string | undefined): boolean {
    const state = ws.getUserData();
    if (state.pages.size >= this.#o.maxPagesPerSocket) {
      this.#error(
        ws,
        encoding,
        "too_many_pages",
        `at most ${this.#o.maxPagesPerSocket} pages per connection`,
        page,
      );
      return false;
    }
    const topic = topicOf(page, encoding);
    state.pages.set(page, { viewer, topic });
    ws.subscribe(topic);
    const current = this.#o.views.watch(page);
    if (current !== undefined) this.#send(ws, encoding, current);
    this.#gauges();
    return true;
  }

  #release(page: string, m: PageMembership): void {
    if (m.viewer !== undefined) this.#removeViewer(page, m.viewer);
    this.#o.views.unwatch(page);
  }

  #addViewer(page: string, viewer: string): void {
    if (this.#o.presence.add(page, viewer)) this.#o.forwarder.enqueue(page, viewer, true);
  }

  #removeViewer(page: string, viewer: string): void {
    if (this.#o.presence.remove(page, viewer)) this.#o.forwarder.enqueue(page, viewer, false);
  }

  #send(ws: Socket, encoding: Encoding, frame: CountFrame): void {
    ws.send(encodeServerFrame(frame, encoding), encoding === "msgpack");
  }

  #error(ws: Socket, encoding: Encoding, code: ErrorCode, message?: string, page?: string): void {
    this.#o.metrics.frameErrors.inc({ code });
    const e = new ProtocolError(code, message);
    const frame =
      page === undefined
        ? { type: "error" as const, code, message: e.message }
        : { type: "error" as const, code, message: e.message, page };
    ws.send(encodeServerFrame(frame, encoding), encoding === "msgpack");
  }

  #takeToken(state: SocketData): boolean {
    const now = this.#o.clock.now();
    state.tokens = Math.min(
      this.#o.burst,
      state.tokens + ((now - state.refilledAt) / 1000) * this.#o.ratePerS,
    );
    state.refilledAt = now;
    if (state.tokens < 1) return false;
    state.tokens -= 1;
    return true;
  }

  #gauges(): void {
    this.#o.metrics.watchedPages.set(this.#o.views.size);
  }
}
