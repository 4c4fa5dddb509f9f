/**
 * The sockets behind `<live-count>` (livecount.ts): one WebSocket per server, shared by every
 * element that names it. What each socket told the server about each page, reconnects with
 * backoff, refusals asked again, a liveness ping, the frames that come back, and what the tab's
 * state (hidden, offline, in the back/forward cache) means for the sockets.
 *
 * Size matters as in livecount.ts: internal names are short. Frame shapes mirror @livecount/protocol.
 */
import type { LiveCountDetail } from "./livecount.js";

/** An element showing a page: it renders that page's value (or error) when told. */
export interface Shown extends HTMLElement {
  r(): void;
}

/** A page's value as count and counts frames carry it. */
type Value = Omit<LiveCountDetail, "page">;

/** The server frames the widget reads (`count`, `counts` and `error`; `pong` is ignored). */
type ServerFrame =
  | ({ type: "count"; page: string } & Value)
  | { type: "counts"; pages: Record<string, Value> }
  | { type: "error"; code: string; message: string; page?: string };

/** What this socket has told the server about a page: nothing, `watch`, or `join`. */
type Sub = typeof NONE | typeof WATCH | typeof JOIN;
export const NONE = 0;
const WATCH = 1;
const JOIN = 2;

/**
 * Full-jitter exponential backoff: a retry waits random(0, min(CAP, BASE * 2^attempt, down)), where
 * `down` is how long the connection has been down (at least BASE): a gateway restarted within a
 * second gets its widgets back within about another second, spread over it, not after an unlucky
 * few drew a long delay early. The SDK's reconnects follow the same rule (reconnectDelayMs).
 */
const BACKOFF_BASE_MS = 500;
const BACKOFF_CAP_MS = 30_000;
/** A connection that stayed open this long was healthy: the next drop starts the backoff over. */
const STABLE_MS = 10_000;
/**
 * A page refused as `rate_limited` (too many new pages from this address) is asked for again after
 * 1 to 4 s, spread so that the widgets of one office behind a NAT address do not come back together.
 */
const RETRY_MS = 1_000;
/**
 * The first count a joining viewer gets (on every join: a reconnect joins again) is the page as the
 * gateway last heard it, before this viewer; the owner's count with the viewer in follows a moment
 * later. The widget shows the first one only if no other came within this long, so a page never
 * shows its own viewer missing (a flash of "0 watching now", also after a restart).
 */
const FIRST_HOLD_MS = 250;
/**
 * A socket can die without a close (a NAT or proxy that dropped the flow, a network that changed
 * under the browser): each PING_MS a socket that heard nothing since the last look sends a `ping`,
 * and one that has not heard even the pong by the next look is given up; the new socket joins again
 * within the grace window, so the count does not dip. A page whose count frames keep coming sends no
 * pings. The same period as the SDK's (pingIntervalMs).
 */
const PING_MS = 25_000;

const VIEWER_KEY = "livecount:viewer";
/** Protocol v1 page and viewer ids: 1..128 printable ASCII characters. */
export const ID = /^[!-~]{1,128}$/;

/** One page id on one server. */
export interface Page {
  /** Elements showing this page. */
  e: Set<Shown>;
  /** Subscription the server has been sent on the current socket. */
  s: Sub;
  /** The token sent with it, if any. */
  k?: string;
  /** Latest count; absent until the first count frame. */
  c?: LiveCountDetail;
  /** Latest error code for this page; cleared by the next count. */
  x?: string;
  /** A join was sent and no count has come since: the next one is held (FIRST_HOLD_MS). */
  f?: boolean;
  /** That count, held back until the next one or the hold's end. */
  h?: Value;
  /** Conn.l when its join or watch went out: a leave since made room before a refusal came. */
  l?: number;
}

/** One server: a single WebSocket shared by every element that names it. */
export interface Conn {
  /** WebSocket URL, e.g. `wss://gateway.example/ws`. */
  u: string;
  /** Pages with at least one element, plus pages whose leave is still to be sent. */
  p: Map<string, Page>;
  w?: WebSocket;
  /** Failed attempts since the last stable connection; drives the backoff. */
  n: number;
  /** When the current outage began (the first retry after a stable connection). */
  d?: number;
  /** Pending reconnect timer. */
  t?: ReturnType<typeof setTimeout>;
  /** A sync is queued for the end of the current task. */
  q?: boolean;
  /** The next sync asks again for the pages refused as `too_many_pages`: there is room now. */
  r?: boolean;
  /** Leaves and unwatches sent on this connection (see Page.l). */
  l: number;
  /** Since the last look (PING_MS): 1 a frame came, 0 none, 2 none and a ping went out. */
  a?: number;
  /** The looks' interval timer of the open socket. */
  i?: ReturnType<typeof setInterval>;
}

// Resolved now: `document.currentScript` is only set while this script first runs. Without it
// (imported as a module), the page's own origin is the default server.
const script = document.currentScript as HTMLScriptElement | null;
const base = (script && script.src) || location.href;

const conns = new Map<string, Conn>();
let viewerId = "";

/**
 * The viewer id of this browser, shared by its tabs through localStorage so a second tab is not a
 * second viewer. Storage can throw (privacy modes, blocked cookies): the id then lives in memory
 * for this page only.
 */
function viewer(): string {
  if (!viewerId) {
    try {
      viewerId = localStorage.getItem(VIEWER_KEY) || "";
    } catch {
      // fall through to a fresh in-memory id
    }
    if (!ID.test(viewerId)) {
      // 16 random bytes as 32 hex characters.
      viewerId = Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) =>
        (b + 256).toString(16).slice(1),
      ).join("");
      try {
        localStorage.setItem(VIEWER_KEY, viewerId);
      } catch {
        // keep the in-memory id
      }
    }
  }
  return viewerId;
}

/** The connection for a `server` attribute (an origin), created on first use. */
export function conn(server: string | null): Conn {
  let origin: string;
  try {
    origin = new URL(server || base, base).origin;
    // `gateway.example:8443` parses as a scheme of its own: meant is that host on this scheme.
    if (origin == "null") origin = new URL("//" + server, base).origin;
  } catch {
    origin = new URL(base).origin;
  }
  let c = conns.get(origin);
  if (!c) conns.set(origin, (c = { u: origin.replace(/^http/, "ws") + "/ws", p: new Map(), n: 0, l: 0 }));
  return c;
}

function send(c: Conn, type: string, page: string, viewer?: string, token?: string): void {
  c.w!.send(JSON.stringify({ type, page, viewer, token, active: viewer && visible() }));
}

/** Whether this tab is in front of its viewer. */
function visible(): boolean {
  return document.visibilityState == "visible";
}

/**
 * Batches subscription changes until the end of the task, so moving an element in the DOM, or
 * replacing one element by another for the same page, sends nothing.
 */
export function queue(c: Conn): void {
  if (!c.q) {
    c.q = true;
    queueMicrotask(() => sync(c));
  }
}

/** Brings the server's view of each page in line with the elements showing it. */
function sync(c: Conn): void {
  c.q = false;
  const open = c.w && c.w.readyState == 1;
  const room = c.r;
  let needed = false;
  c.r = false;
  c.p.forEach((p, id) => {
    let want: Sub = NONE;
    let token: string | undefined;
    p.e.forEach((el) => {
      want = el.getAttribute("mode") == "watch" ? want || WATCH : JOIN;
      token = token || el.getAttribute("token") || undefined;
    });
    // An invalid id would only earn a page-less error frame from the server: it is not sent.
    // A page refused for want of room on the socket is asked for again once another left it.
    if (open && (want != p.s || (want && token != p.k)) && ID.test(id) && (room || p.x != "too_many_pages")) {
      // join -> watch is a leave then a watch; join already implies watch.
      if (p.s > want) {
        send(c, p.s == JOIN ? "leave" : "unwatch", id);
        c.l++;
        if (!want && !c.r) {
          c.r = true;
          queue(c);
        }
      }
      if (want) send(c, want == JOIN ? "join" : "watch", id, want == JOIN ? viewer() : undefined, token);
      p.f = (want as Sub) == JOIN;
      p.s = want;
      p.l = c.l;
      p.k = token;
    }
    if (!want) c.p.delete(id);
    else if (ID.test(id)) needed = true;
  });
  if (needed) {
    if (!c.w && !c.t) connect(c);
  } else {
    // Nothing left to show (a single-page app's route without widgets, or invalid ids only): no
    // socket, and none waiting to reconnect.
    clearTimeout(c.t);
    clearInterval(c.i);
    c.t = undefined;
    if (c.w) {
      c.w.onmessage = c.w.onclose = null;
      c.w.close();
      c.w = undefined;
    }
  }
}

function connect(c: Conn): void {
  c.t = undefined;
  let opened = 0;
  let w: WebSocket;
  try {
    w = c.w = new WebSocket(c.u, "livecount.counts");
  } catch {
    // A malformed URL or a blocked scheme (ws: from an https: page) throws synchronously.
    return retry(c);
  }
  w.onopen = () => {
    opened = Date.now();
    c.r = true;
    c.a = 1;
    c.i = setInterval(() => {
      // A dead socket's close would wait out the closing handshake (a minute in Chromium): the
      // handlers go (what it might still deliver is not this connection's), and the socket is
      // treated as closed now.
      if (c.a! > 1) {
        w.onmessage = w.onclose = null;
        w.close();
        lost();
      } else if (c.a) c.a = 0;
      else {
        c.a = 2;
        w.send('{"type":"ping"}');
      }
    }, PING_MS);
    sync(c);
  };
  w.onmessage = (m) => {
    c.a = 1;
    receive(c, m.data);
  };
  const lost = (w.onclose = () => {
    clearInterval(c.i);
    c.w = undefined;
    // The server forgot this socket's joins; the next socket sends them again. Until its first
    // count, what the elements show is the last value known: `data-error="offline"` says so.
    c.p.forEach((p) => {
      p.s = NONE;
      if (!p.x) p.e.forEach((el) => el.setAttribute("data-error", "offline"));
    });
    if (opened && Date.now() - opened > STABLE_MS) c.n = 0;
    retry(c);
  });
}

function retry(c: Conn): void {
  const now = Date.now();
  if (!c.n) c.d = now;
  if (c.p.size)
    c.t = setTimeout(
      connect,
      Math.random() *
        Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** c.n++, Math.max(BACKOFF_BASE_MS, now - c.d!)),
      c,
    );
}

function receive(c: Conn, data: unknown): void {
  let f: ServerFrame;
  try {
    f = JSON.parse(data as string);
  } catch {
    return;
  }
  if (!f) return;
  if (f.type == "counts") for (const id in f.pages) show(c, id, f.pages[id]);
  else if (f.type == "count") show(c, f.page, f);
  else if (f.type == "error") {
    const p = c.p.get(f.page!);
    // Without a page: frames past the socket's budget were dropped, which ones unknown (a join, a
    // leave). A new socket starts from what the elements want.
    if (!p) return void (f.code == "rate_limited" && c.w!.close());
    // What the publisher's page asked for and was refused, for whoever reads its console.
    console.warn("livecount:", f.page, f.code, f.message);
    p.x = f.code;
    // Refused: not subscribed. For now (too many new pages from this address): ask again later;
    // for want of room (too many pages on the socket): when one leaves it (sync).
    if (f.code == "rate_limited" || f.code == "too_many_pages") p.s = NONE;
    if (f.code == "too_many_pages" && p.l != c.l) {
      c.r = true;
      queue(c);
    }
    if (f.code == "rate_limited") setTimeout(queue, RETRY_MS + Math.random() * RETRY_MS * 3, c);
    p.e.forEach((el) => el.r());
  }
}

/** A page's new value, to its elements. */
function show(c: Conn, page: string, v: Value | null | undefined): void {
  const p = c.p.get(page);
  // A malformed value is dropped: the widget never throws into the host page.
  if (!p || !v) return;
  if (p.f) {
    p.f = false;
    p.h = v;
    setTimeout(() => p.h && show(c, page, p.h), FIRST_HOLD_MS);
    return;
  }
  p.h = undefined;
  p.c = {
    page,
    viewers: v.viewers,
    active: v.active,
    connections: v.connections,
    counters: v.counters || {},
    dcs: v.dcs,
    lag_ms: v.lag_ms,
  };
  p.x = undefined;
  p.e.forEach((el) => el.r());
}

// Tell each server whether this tab is in front of its viewer now: one frame for every page the
// socket joined (joins carry the state, so a socket not open yet learns it when it joins).
// A page kept in the back/forward cache is no viewer: its sockets close (the server lets its
// viewers go after the grace window) and reconnect when it is shown again (their retry timers).
addEventListener("pagehide", () => conns.forEach((c) => c.w && c.w.close()));
// The browser knows the network is gone before the socket does: the number shown is the last one
// known. Back online, a socket waiting out its backoff connects now.
addEventListener("offline", () =>
  conns.forEach((c) =>
    c.p.forEach((p) => p.x || p.e.forEach((el) => el.setAttribute("data-error", "offline"))),
  ),
);
addEventListener("online", () =>
  conns.forEach((c) => {
    if (c.t) {
      clearTimeout(c.t);
      c.n = 0;
      connect(c);
    } else c.p.forEach((p) => p.e.forEach((el) => el.r()));
  }),
);
document.addEventListener("visibilitychange", () =>
  conns.forEach((c) => {
    if (c.w && c.w.readyState == 1) c.w.send(JSON.stringify({ type: "active", active: visible() }));
  }),
);
