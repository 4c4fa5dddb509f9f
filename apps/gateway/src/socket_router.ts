import {
  ProtocolError,
  decodeClientFrame,
  encodeServerFrame,
  errorFrameOf,
  type ClientFrame,
  type Encoding,
} from "@livecount/protocol";
import { FULL_BUCKET_AT, type BucketFullAt, type Clock } from "@livecount/runtime";
import type { WebSocket } from "uWebSockets.js";
import type { GatewayMetrics } from "./gateway_metrics.js";
import { rememberLeft, takeLeft, type LeftViewers } from "./left_viewers.js";
import type { LocalPresence } from "./local_presence.js";
import { OpenSockets } from "./open_sockets.js";
import type { CountsSets, PageDelivery } from "./page_delivery.js";
import type { PageViews } from "./page_views.js";
import type { PresenceForwarder } from "./presence_forwarder.js";
import type { AddressPages } from "./address_pages.js";
import { FrameBudget } from "./frame_budget.js";
import type { PrivatePages } from "./private_pages.js";
import {
  findPage,
  joinedAs,
  pageCount,
  pagesOf,
  withPage,
  withoutPage,
  type PageMembership,
  type SocketPages,
} from "./socket_pages.js";

/** A frame that arrived while a join token of its socket was being verified. */
interface QueuedFrame {
  readonly frame: ClientFrame;
  readonly encoding: Encoding;
}

/**
 * Per-socket state, kept in uWS user data. uWS copies these fields onto its socket object, into a
 * property array V8 grows three slots at a time: six fields fill two steps (64 bytes a socket), a
 * seventh would take a third (88). What idle sockets do not need lives in `rare`.
 */
export interface SocketData {
  /** What the socket counts under in the connection limits: its client address, interned (edge_guard.ts). */
  readonly address: string;
  pages: SocketPages;
  /** The frame rate limit's token bucket, in one number (frame_budget.ts). */
  rateFullAt: BucketFullAt;
  /** Created the first time the socket needs any of it. */
  rare: RareSocketState | undefined;
  /** Where the socket sits among the open ones (open_sockets.ts); -1 before it opens and once closed. */
  openSlot: number;
  /** Its page sets when it negotiated `livecount.counts` (page_delivery.ts); undefined for protocol v1. */
  readonly counts: CountsSets | undefined;
}

/** Per-socket state that only sockets doing something unusual need. */
interface RareSocketState {
  /**
   * The viewer key the socket counts as when a join names no viewer (`s:<incarnation>:<n>`), made at
   * its first such join and kept for its life. The widget always names its viewer.
   */
  self: string | undefined;
  /** Pages this socket left as a viewer within the grace window (left_viewers.ts). */
  left: LeftViewers | undefined;
  /**
   * While a join token is verified (asynchronously), later frames wait here and are handled in
   * order after it. At most a burst of the rate limit can arrive meanwhile.
   */
  queued: QueuedFrame[] | undefined;
  /** The socket is closed: a verification finishing late must not touch it. */
  closed: boolean;
  /** Frames dropped for the rate limit since its budget was last full; at `maxRefused` it is closed. */
  violations: number;
  /** A frame to it was dropped for backpressure (it does not read): it is being closed as a slow consumer. */
  slow: boolean;
}

function rareOf(state: SocketData): RareSocketState {
  return (state.rare ??= {
    self: undefined,
    left: undefined,
    queued: undefined,
    closed: false,
    violations: 0,
    slow: false,
  });
}

export type Socket = WebSocket<SocketData>;

export interface SocketRouterOptions {
  readonly presence: LocalPresence;
  readonly forwarder: PresenceForwarder;
  readonly views: PageViews;
  /** How the values of a socket's pages reach it. */
  readonly delivery: PageDelivery;
  readonly metrics: GatewayMetrics;
  readonly clock: Clock;
  /** This gateway's incarnation, part of the viewer key of sockets that name no viewer. */
  readonly incarnation: string;
  readonly maxPagesPerSocket: number;
  /** Pages per client address, over its sockets: how many at once and how fast new ones (address_pages.ts). */
  readonly addressPages: AddressPages;
  readonly ratePerS: number;
  readonly burst: number;
  /** Frames refused for the rate limit, since the budget was last full, that close the socket. */
  readonly maxRefused: number;
  /**
   * How long a viewer id a socket left stays remembered, to be ended at once if the socket joins the
   * page again as another id: the grace window (LIVECOUNT_GRACE_MS) plus the time the owner may
   * count it past that (its grace starts when the leave reaches it; its sweep runs every 250 ms).
   * Ending an id the owner has already dropped changes nothing.
   */
  readonly leftViewerHoldMs: number;
  /** Protocol v1's frame size limit: a larger frame closes the socket with 1009. */
  readonly maxFrameBytes: number;
  readonly privatePages: PrivatePages;
}

/** WebSocket close code for policy violations (RFC 6455). */
const CLOSE_POLICY_VIOLATION = 1008;
/** WebSocket close code for a message too big to process (RFC 6455). */
const CLOSE_MESSAGE_TOO_BIG = 1009;

/**
 * Why a socket closed, for `livecount_gateway_sockets_closed_total{reason}`: "normal" (1000, 1001),
 * "slow_consumer" (it held more unsent bytes than LIVECOUNT_MAX_BACKPRESSURE_BYTES: uWS dropped a
 * frame and closed it), a code RFC 6455 defines (1002 to 1015, e.g. 1006 for a connection dropped
 * without a close frame), or "application" for any code a client picks (4000 to 4999; uWS reports
 * 3000 to 3999 as 1006): a label value per such code would let any script add series to /metrics,
 * a thousand of them, for good.
 */
function closeReason(state: SocketData, code: number): string {
  if (state.rare?.slow === true) return "slow_consumer";
  if (code === 1000 || code === 1001) return "normal";
  if (code >= 1002 && code <= 1015) return String(code);
  return "application";
}

/**
 * Decodes client frames and routes them: presence to the local presence and its forwarder, watches
 * to the page views, frames back through uWS topics. It owns no presence logic of its own.
 */
export class SocketRouter {
  readonly #o: SocketRouterOptions;
  readonly #open = new OpenSockets<Socket>();
  readonly #frames: FrameBudget;
  /** The number of the next socket that joins without naming a viewer. */
  #nextSelf = 1;

  constructor(options: SocketRouterOptions) {
    this.#o = options;
    this.#frames = new FrameBudget({ ratePerS: options.ratePerS, burst: options.burst }, options.clock);
  }

  /**
   * State for a new socket from `address` (its key in the connection limits); `counts`: it
   * negotiated counts frames.
   */
  newSocketData(address: string, counts: boolean): SocketData {
    return {
      address,
      pages: undefined,
      rateFullAt: FULL_BUCKET_AT,
      rare: undefined,
      openSlot: -1,
      counts: counts ? { json: undefined, msgpack: undefined } : undefined,
    };
  }

  /** Sockets open now. */
  get openSockets(): number {
    return this.#open.size;
  }

  open(ws: Socket): void {
    this.#open.add(ws);
    this.#o.metrics.sockets.inc();
    this.#o.metrics.socketsOpened.inc();
  }

  message(ws: Socket, data: ArrayBuffer, isBinary: boolean): void {
    const state = ws.getUserData();
    const encoding: Encoding = isBinary ? "msgpack" : "json";
    if (data.byteLength > this.#o.maxFrameBytes) {
      this.#o.metrics.socketsClosed.inc({ reason: "frame_too_large" });
      ws.end(CLOSE_MESSAGE_TOO_BIG, "frame too large");
      return;
    }
    const fullAt = this.#frames.take(state.rateFullAt);
    if (fullAt === undefined) {
      if (++rareOf(state).violations >= this.#o.maxRefused) {
        this.#o.metrics.socketsClosed.inc({ reason: "rate_limited" });
        ws.end(CLOSE_POLICY_VIOLATION, "rate limit exceeded");
      } else this.#error(ws, encoding, new ProtocolError("rate_limited"));
      return;
    }
    if (state.rare !== undefined && state.rare.violations > 0 && this.#frames.wasFull(state.rateFullAt))
      state.rare.violations = 0;
    state.rateFullAt = fullAt;
    let frame: ClientFrame;
    try {
      frame = decodeClientFrame(data, encoding);
    } catch (err) {
      this.#error(ws, encoding, err);
      return;
    }
    this.#o.metrics.framesIn.inc({ type: frame.type });
    const queued = state.rare?.queued;
    if (queued !== undefined) queued.push({ frame, encoding });
    else this.#route(ws, state, frame, encoding);
  }

  #route(ws: Socket, state: SocketData, frame: ClientFrame, encoding: Encoding): void {
    switch (frame.type) {
      case "ping":
        ws.send(encodeServerFrame({ type: "pong" }, encoding), encoding === "msgpack");
        return;
      case "join":
      case "watch":
        if (this.#o.privatePages.isPrivate(frame.page)) return this.#admitPrivate(ws, state, frame, encoding);
        if (frame.type === "watch") return this.#watch(ws, encoding, frame.page);
        // Client ids and socket ids live in separate namespaces, so no client can claim a socket's id.
        return this.#join(
          ws,
          encoding,
          frame.page,
          frame.viewer !== undefined ? `v:${frame.viewer}` : this.#selfKey(state),
          frame.active !== false,
        );
      case "active":
        if (frame.page !== undefined) return this.#setActive(state, frame.page, frame.active);
        for (const m of pagesOf(state.pages)) this.#setActive(state, m.page, frame.active);
        return;
      case "leave":
        return this.#leave(ws, frame.page, true);
      case "unwatch":
        return this.#leave(ws, frame.page, false);
    }
  }

  /**
   * A join or watch of a private page: only with a valid join token, whose `sub` is the viewer
   * counted. Frames arriving meanwhile wait, so the socket's frames still take effect in order.
   */
  #admitPrivate(
    ws: Socket,
    state: SocketData,
    frame: Extract<ClientFrame, { type: "join" | "watch" }>,
    encoding: Encoding,
  ): void {
    const rare = rareOf(state);
    rare.queued = [];
    const { page } = frame;
    this.#o.privatePages
      .verify(frame.token, page)
      .then(
        (sub) => {
          if (rare.closed) return;
          ws.cork(() => {
            if (frame.type === "join") this.#join(ws, encoding, page, `v:${sub}`, frame.active !== false);
            else this.#watch(ws, encoding, page);
          });
        },
        (err: unknown) => {
          if (!rare.closed) ws.cork(() => this.#error(ws, encoding, err));
        },
      )
      .finally(() => this.#drain(ws, state, rare));
  }

  /** Handles the frames that waited for a verification, until one starts another. */
  #drain(ws: Socket, state: SocketData, rare: RareSocketState): void {
    const queued = rare.queued ?? [];
    rare.queued = undefined;
    if (rare.closed || queued.length === 0) return;
    ws.cork(() => {
      for (let i = 0; i < queued.length; i++) {
        if (rare.queued !== undefined) {
          rare.queued.push(...queued.slice(i));
          return;
        }
        this.#route(ws, state, queued[i]!.frame, queued[i]!.encoding);
      }
    });
  }

  /**
   * uWS dropped a frame to this socket: it holds more unsent bytes than LIVECOUNT_MAX_BACKPRESSURE_BYTES
   * (closeOnBackpressureLimit closes it next).
   */
  dropped(ws: Socket): void {
    rareOf(ws.getUserData()).slow = true;
    this.#o.metrics.framesDropped.inc();
  }

  /** The socket is gone (closed by either side or timed out): everything it held is released. */
  close(ws: Socket, code: number): void {
    this.#open.delete(ws);
    const state = ws.getUserData();
    const { rare } = state;
    if (rare !== undefined) {
      rare.closed = true;
      rare.queued = undefined;
      rare.left = undefined;
    }
    for (const m of pagesOf(state.pages)) this.#release(state, m);
    state.pages = undefined;
    this.#o.delivery.closed(state);
    this.#o.metrics.sockets.dec();
    this.#o.metrics.socketsClosed.inc({ reason: closeReason(state, code) });
    this.#gauges();
  }

  /** Ends every open socket with a close frame (shutdown: clients reconnect to another gateway). */
  endAll(code: number, reason: string): void {
    for (const ws of this.#open.list()) ws.end(code, reason);
  }

  /**
   * Counts the socket as `key` on `page`. One socket is at most one viewer of a page: joining as
   * another viewer than the one it counts as, or left as within the grace window, ends the previous
   * one at once (unless another socket holds it), so cycling viewer ids leaves no ghosts behind. A
   * join of the page as the viewer the socket counts as already only sets whether it is active.
   */
  #join(ws: Socket, encoding: Encoding, page: string, key: string, active: boolean): void {
    const state = ws.getUserData();
    let m = findPage(state.pages, page);
    if (m !== undefined) {
      if (m.viewer === key) return this.#setActive(state, page, active);
      if (m.viewer !== undefined) this.#removeViewer(m, true);
      m.viewer = key;
      m.active = active;
    } else if ((m = this.#subscribe(ws, encoding, page, key, active)) === undefined) return;
    const left = takeLeft(state.rare?.left, m.page, this.#o.clock.monotonic());
    if (left !== undefined && left !== key) this.#dropLeft(m.page, left);
    // An id new to the socket spends its address's new visitors; past them it counts, not as a
    // visitor. An id the socket joined another page as is a visitor here as it was there.
    const other = joinedAs(state.pages, key, m);
    const visitor =
      other !== undefined
        ? !this.#o.presence.isUnvisited(other.page, key)
        : this.#o.addressPages.newVisitor(state.address);
    this.#o.forwarder.enqueue(
      m.page,
      key,
      this.#o.presence.add(m.page, key, active, visitor),
      false,
      visitor,
    );
  }

  /** The viewer key of a socket that joins without naming a viewer: its own, the same on every page. */
  #selfKey(state: SocketData): string {
    return (rareOf(state).self ??= `s:${this.#o.incarnation}:${this.#nextSelf++}`);
  }

  /** Whether a joined page is in front of its viewer on this socket; a no-op for pages not joined. */
  #setActive(state: SocketData, page: string, active: boolean): void {
    const m = findPage(state.pages, page);
    if (m?.viewer === undefined || m.active === active) return;
    m.active = active;
    const hold = this.#o.presence.setActive(m.page, m.viewer, active);
    if (hold !== undefined) this.#o.forwarder.enqueue(m.page, m.viewer, hold);
  }

  #watch(ws: Socket, encoding: Encoding, page: string): void {
    if (findPage(ws.getUserData().pages, page) !== undefined) return;
    this.#subscribe(ws, encoding, page, undefined, false);
  }

  /** `leave` undoes a join; `unwatch` undoes a watch. Either one for what the socket does not have is a no-op. */
  #leave(ws: Socket, page: string, joined: boolean): void {
    const state = ws.getUserData();
    const m = findPage(state.pages, page);
    if (m === undefined || (m.viewer !== undefined) !== joined) return;
    state.pages = withoutPage(state.pages, m);
    this.#o.delivery.unfollow(ws, state, m.page);
    this.#release(state, m);
    if (m.viewer !== undefined) {
      const { leftViewerHoldMs, maxPagesPerSocket } = this.#o;
      rememberLeft(
        (rareOf(state).left ??= new Map()),
        m.page,
        m.viewer,
        this.#o.clock.monotonic(),
        leftViewerHoldMs,
        maxPagesPerSocket,
        (p, v) => this.#dropLeft(p, v),
      );
    }
    this.#gauges();
  }

  /** Ends a viewer this socket left, without grace, unless another socket here still holds it. */
  #dropLeft(page: string, viewer: string): void {
    if (!this.#o.presence.has(page, viewer)) this.#o.forwarder.enqueue(page, viewer, undefined, true);
  }

  #subscribe(
    ws: Socket,
    encoding: Encoding,
    page: string,
    viewer: string | undefined,
    active: boolean,
  ): PageMembership | undefined {
    const state = ws.getUserData();
    const { maxPagesPerSocket } = this.#o;
    const refusal =
      pageCount(state.pages) >= maxPagesPerSocket
        ? new ProtocolError("too_many_pages", `at most ${maxPagesPerSocket} pages per connection`, { page })
        : this.#o.addressPages.take(state.address, page, !this.#o.views.has(page));
    if (refusal !== undefined) {
      this.#error(ws, encoding, refusal);
      return undefined;
    }
    const { id, frame } = this.#o.views.watch(page);
    const m: PageMembership = { page: id, viewer, active };
    state.pages = withPage(state.pages, m);
    this.#o.delivery.follow(ws, state, id, encoding);
    if (frame !== undefined) this.#o.delivery.send(ws, state, encoding, frame);
    this.#gauges();
    return m;
  }

  #release(state: SocketData, m: PageMembership): void {
    if (m.viewer !== undefined) this.#removeViewer(m, false);
    this.#o.views.unwatch(m.page);
    this.#o.addressPages.release(state.address);
  }

  /** The socket stops counting as its viewer of the page; `drop`: the viewer gets no grace at the owner. */
  #removeViewer(m: PageMembership, drop: boolean): void {
    const viewer = m.viewer!;
    this.#o.forwarder.enqueue(m.page, viewer, this.#o.presence.remove(m.page, viewer, m.active), drop);
  }

  /** Answers a failed frame with an error frame (a ProtocolError's code, message and page). */
  #error(ws: Socket, encoding: Encoding, err: unknown): void {
    const frame = errorFrameOf(err);
    this.#o.metrics.frameErrors.inc({ code: frame.code });
    ws.send(encodeServerFrame(frame, encoding), encoding === "msgpack");
  }

  #gauges(): void {
    this.#o.metrics.watchedPages.set(this.#o.views.size);
  }
}
