/**
 * One worker process of the viewer driver (viewers.js): opens many WebSockets from one loopback
 * source address (so one process stays under the open-file limit and one address under its
 * ephemeral ports), joins or watches pages, optionally churns, and counts what comes back.
 *
 * Clients: `ws` speaking livecount protocol v1 (JSON text frames; with `frames: "counts"` it offers
 * the `livecount.counts` subprotocol and reads `counts` frames, every changed page of the socket in
 * one frame), or `socketio` (socket.io-client, websocket transport only) speaking the Socket.IO
 * baseline's events (`watch`/`join` with a page, `count` frames of the same shape), for the fan-out
 * comparison. `pageUpdates` counts page values received: one per count frame, one per page of a
 * counts frame.
 *
 * IPC: the parent sends {cmd: "start", options}; the worker answers {type: "opened", ...} once every
 * socket is open and has its first count frame of each of its pages, then {cmd: "stats"} ->
 * {type: "stats", ...} and {cmd: "close"} -> {type: "closed"}. It exits when the parent goes away.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { io } from "socket.io-client";
import WebSocket from "ws";

/**
 * @typedef {object} WorkerOptions
 * @property {number} id
 * @property {string} url             ws://host:port/ws (livecount) or http://host:port (socketio)
 * @property {"ws"|"socketio"} client
 * @property {string} localAddress    e.g. 127.0.0.12
 * @property {number} sockets
 * @property {string[]} pages         socket i uses pages[(pageOffset + i + k) % pages.length], k < pagesPerSocket
 * @property {number} pageOffset
 * @property {number} pagesPerSocket  pages one socket joins or watches (the widgets of one web page)
 * @property {"join"|"watch"} mode
 * @property {string} viewerPrefix    viewer id = `${viewerPrefix}${id}-${i}` (join mode)
 * @property {number} connectConcurrency  handshakes in flight at once
 * @property {number} churnPerS       sockets per second that leave their pages and join the next ones
 * @property {string} [counter]       a counter whose last value per page is tracked (e.g. "likes")
 * @property {"count"|"counts"} [frames]  `ws` client: protocol v1 count frames, or negotiated counts frames
 */

const FIRST_COUNT_TIMEOUT_MS = 30_000;

/** Per-socket state. */
class Viewer {
  constructor(index, start) {
    this.index = index;
    /** Index in options.pages of this socket's first page. */
    this.start = start;
    this.pages = pagesFrom(start);
    /** Pages left over from before the last churn step: their frames may still be on the way. */
    this.previous = new Set();
    this.conn = undefined;
    this.joinedAt = 0;
    /** Pages joined whose first count frame has not arrived yet. */
    this.awaiting = new Set();
    this.open = false;
    /** page -> last value of options.counter seen */
    this.last = new Map();
  }
}

let options;
const viewers = [];
const stats = {
  opened: 0,
  failed: 0,
  closed: 0,
  frames: 0,
  countFrames: 0,
  countsFrames: 0,
  pageUpdates: 0,
  errorFrames: 0,
  badFrames: 0,
  wrongPage: 0,
  lateFrames: 0,
  joins: 0,
  firstError: undefined,
};
/** join -> first count frame, ms, since the last stats request. */
let latencies = [];
let churnTimer;
/** Sockets that have had the first count frame of every page they joined. */
let complete = 0;

function pagesFrom(start) {
  const out = [];
  for (let k = 0; k < options.pagesPerSocket; k++)
    out.push(options.pages[(start + k) % options.pages.length]);
  return out;
}

/** One page's value, from a count frame or one page of a counts frame. */
function onPageValue(v, page, value) {
  stats.pageUpdates++;
  if (!v.pages.includes(page)) {
    if (v.previous.has(page)) stats.lateFrames++;
    else stats.wrongPage++;
    return;
  }
  if (typeof value.viewers !== "number" || value.viewers < 0) stats.badFrames++;
  if (options.counter !== undefined) v.last.set(page, value.counters?.[options.counter]);
  if (v.awaiting.delete(page)) {
    latencies.push(performance.now() - v.joinedAt);
    if (v.awaiting.size === 0) complete++;
  }
}

function onFrame(v, text) {
  stats.frames++;
  let frame;
  try {
    frame = JSON.parse(text);
  } catch {
    stats.badFrames++;
    return;
  }
  if (frame.type === "count") {
    stats.countFrames++;
    onPageValue(v, frame.page, frame);
  } else if (frame.type === "counts") {
    stats.countsFrames++;
    for (const page in frame.pages) onPageValue(v, page, frame.pages[page]);
  } else if (frame.type === "error") {
    stats.errorFrames++;
    stats.firstError ??= `${frame.code}: ${frame.message}`;
  }
}

function sendJoins(v) {
  v.joinedAt = performance.now();
  const { mode } = options;
  for (const page of v.pages) {
    v.awaiting.add(page);
    stats.joins++;
    if (options.client === "ws") {
      const frame = { type: mode, page };
      if (mode === "join") frame.viewer = `${options.viewerPrefix}${options.id}-${v.index}`;
      v.conn.send(JSON.stringify(frame));
    } else {
      v.conn.emit(mode, page);
    }
  }
}

function sendLeaves(v) {
  const type = options.mode === "join" ? "leave" : "unwatch";
  for (const page of v.pages) {
    if (options.client === "ws") v.conn.send(JSON.stringify({ type, page }));
    else v.conn.emit(type, page);
  }
}

function connectWs(v) {
  return new Promise((resolve) => {
    const protocols = options.frames === "counts" ? ["livecount.counts"] : [];
    const ws = new WebSocket(options.url, protocols, {
      localAddress: options.localAddress,
      perMessageDeflate: false,
    });
    v.conn = ws;
    let settled = false;
    ws.on("open", () => {
      settled = true;
      v.open = true;
      stats.opened++;
      sendJoins(v);
      resolve();
    });
    ws.on("message", (data, isBinary) => {
      if (!isBinary) onFrame(v, data.toString());
    });
    ws.on("error", (err) => {
      stats.firstError ??= String(err.message);
      if (!settled) {
        settled = true;
        stats.failed++;
        resolve();
      }
    });
    ws.on("close", () => {
      if (v.open) stats.closed++;
      v.open = false;
    });
  });
}

function connectSocketIo(v) {
  return new Promise((resolve) => {
    const socket = io(options.url, {
      transports: ["websocket"],
      reconnection: false,
      forceNew: true,
      localAddress: options.localAddress,
      perMessageDeflate: false,
    });
    v.conn = socket;
    let settled = false;
    socket.on("connect", () => {
      settled = true;
      v.open = true;
      stats.opened++;
      sendJoins(v);
      resolve();
    });
    socket.on("count", (frame) => {
      stats.frames++;
      stats.countFrames++;
      onPageValue(v, frame.page, frame);
    });
    socket.on("connect_error", (err) => {
      stats.firstError ??= String(err.message);
      if (!settled) {
        settled = true;
        stats.failed++;
        resolve();
      }
    });
    socket.on("disconnect", () => {
      if (v.open) stats.closed++;
      v.open = false;
    });
  });
}

async function start(o) {
  options = { pagesPerSocket: 1, ...o };
  for (let i = 0; i < o.sockets; i++) viewers.push(new Viewer(i, (o.pageOffset + i) % o.pages.length));
  const connect = options.client === "ws" ? connectWs : connectSocketIo;
  let next = 0;
  const started = performance.now();
  const lane = async () => {
    while (next < viewers.length) await connect(viewers[next++]);
  };
  await Promise.all(Array.from({ length: options.connectConcurrency }, lane));
  const openedMs = performance.now() - started;
  // Every open socket has to see a first count frame of each page (failed ones never will).
  const deadline = performance.now() + FIRST_COUNT_TIMEOUT_MS;
  while (complete < stats.opened && performance.now() < deadline) await sleep(20);
  if (options.churnPerS > 0) startChurn();
  return { openedMs, complete, ...stats };
}

/** Every 100 ms, churnPerS/10 sockets leave their pages and join the next ones (a navigation). */
function startChurn() {
  let cursor = 0;
  let carry = 0;
  churnTimer = setInterval(() => {
    carry += options.churnPerS / 10;
    for (; carry >= 1; carry--) {
      const v = viewers[cursor++ % viewers.length];
      if (!v.open) continue;
      sendLeaves(v);
      v.previous = new Set(v.pages);
      v.start = (v.start + 1) % options.pages.length;
      v.pages = pagesFrom(v.start);
      for (const page of v.pages) v.previous.delete(page);
      if (v.awaiting.size === 0) complete--;
      v.awaiting.clear();
      sendJoins(v);
    }
  }, 100);
}

function snapshot() {
  const lastByPage = {};
  if (options.counter !== undefined) {
    for (const v of viewers) {
      if (!v.open) continue;
      for (const page of v.pages) {
        const entry = (lastByPage[page] ??= { min: Infinity, max: -Infinity, sockets: 0 });
        const value = v.last.get(page) ?? -1;
        entry.min = Math.min(entry.min, value);
        entry.max = Math.max(entry.max, value);
        entry.sockets++;
      }
    }
  }
  const out = { ...stats, complete, open: viewers.filter((v) => v.open).length, latencies, lastByPage };
  latencies = [];
  return out;
}

async function close() {
  if (churnTimer !== undefined) clearInterval(churnTimer);
  for (const v of viewers) {
    if (options.client === "ws") v.conn?.terminate();
    else v.conn?.disconnect();
  }
}

process.on("message", (msg) => {
  switch (msg?.cmd) {
    case "start":
      start(msg.options).then(
        (result) => process.send({ type: "opened", ...result, latencies: snapshot().latencies }),
        (err) => process.send({ type: "error", message: String(err?.stack ?? err) }),
      );
      break;
    case "stats":
      process.send({ type: "stats", ...snapshot() });
      break;
    case "close":
      close().then(() => process.send({ type: "closed" }));
      break;
  }
});
process.on("disconnect", () => process.exit(0));
