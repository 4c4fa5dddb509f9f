/**
 * One client process of the reconnect-storm benchmark (loadtest/bench/storm_bench.js): thousands of
 * browser tabs, each one WebSocket that joins the pages of its widgets as its viewer id, and that
 * reconnects the way the widget does (packages/widget/src/connections.ts): on a close, wait a
 * full-jitter delay under a cap that doubles per failed try from 500 ms up to 30 s and never
 * exceeds how long the connection has been down (at least 500 ms), then open a new socket and
 * join again. A connection that stayed open 10 s was healthy: the next drop starts over.
 *
 * Sockets are spread round robin over several loopback source addresses (127.0.0.x), as many
 * browsers would be, so the gateway's per-address limits apply at their defaults. They are lean
 * WebSockets (lean_ws.js): the tabs share the server's cores, a real audience would not.
 *
 * It also times its own event loop: the stalls of a client process sharing the cores delay every
 * handshake and frame it handles, which is part of what the storm measures here (`stats.stalls`).
 *
 * IPC: {cmd: "start", options} -> {type: "opened"} once every socket is open and has had a first
 * count frame of each of its pages; {cmd: "stats"} -> {type: "stats", ...}; {cmd: "close"} ->
 * {type: "closed"}. Exits when the parent goes away.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { reconnectDelayMs } from "@livecount/sdk";
import { leanWebSocket } from "./lean_ws.js";

/**
 * @typedef {object} StormOptions
 * @property {string} url                 ws://host:port/ws
 * @property {string[]} addresses          source addresses, used round robin
 * @property {Array<[string, string[]]>} tabs  per socket: its viewer id and the pages it joins
 * @property {number} baseMs               the widget's BACKOFF_BASE_MS
 * @property {number} maxMs                the widget's BACKOFF_CAP_MS
 * @property {number} stableMs             the widget's STABLE_MS
 * @property {number} connectConcurrency   handshakes in flight at once for the first connections
 * @property {boolean} capByOutage         false: the widget before the outage cap (a comparison)
 */

const FIRST_COUNT_TIMEOUT_MS = 60_000;
/** How often this process's event loop is timed, and from what lateness a turn counts as a stall. */
const LOOP_CHECK_MS = 10;
const STALL_MS = 50;
/** Stalls kept (the latest), as [epoch ms when it began, ms]: the storm's clients on shared cores. */
const MAX_STALLS = 1000;
const stalls = [];
{
  let last = Date.now();
  setInterval(() => {
    const now = Date.now();
    if (now - last - LOOP_CHECK_MS >= STALL_MS) {
      stalls.push([last, now - last - LOOP_CHECK_MS]);
      if (stalls.length > MAX_STALLS) stalls.shift();
    }
    last = now;
  }, LOOP_CHECK_MS).unref();
}

/** @type {StormOptions} */
let options;
/** @type {Tab[]} */
const tabs = [];
let closing = false;
const stats = { attempts: 0, failures: 0, opens: 0, countFrames: 0, errorFrames: 0, firstError: undefined };

/** One tab: its socket, like the widget's `Conn` for one server. */
class Tab {
  constructor(index, viewer, pages) {
    this.index = index;
    this.viewer = viewer;
    this.pages = pages;
    this.address = options.addresses[index % options.addresses.length];
    /** Failed attempts since the last healthy connection (the widget's `n`). */
    this.failures = 0;
    /** When the current outage began (the first retry after a healthy connection). */
    this.downSince = 0;
    this.ws = undefined;
    this.open = false;
    /** Pages whose first count frame on the current socket has not arrived. */
    this.awaiting = new Set();
    /** Epoch ms of the last successful open, and of the first count frame of its last page after it. */
    this.openedAt = 0;
    /** How long the last successful open took from its connect (TCP and the WebSocket handshake). */
    this.openTookMs = 0;
    this.joinedAt = 0;
    /** Epoch ms the last time the socket closed after being open. */
    this.lostAt = 0;
  }

  connect() {
    if (closing) return;
    stats.attempts++;
    let opened = 0;
    const connectAt = Date.now();
    const ws = leanWebSocket(options.url, this.address, {
      open: () => {
        opened = Date.now();
        this.open = true;
        this.openedAt = opened;
        this.openTookMs = opened - connectAt;
        stats.opens++;
        this.awaiting = new Set(this.pages);
        for (const page of this.pages)
          ws.send(JSON.stringify({ type: "join", page, viewer: this.viewer, active: true }));
      },
      message: (text) => this.receive(text),
      close: (err) => {
        if (err !== undefined) stats.firstError ??= String(err.message);
        if (this.ws !== ws) return;
        this.ws = undefined;
        if (this.open) this.lostAt = Date.now();
        else stats.failures++;
        this.open = false;
        if (opened && Date.now() - opened > options.stableMs) this.failures = 0;
        this.retry();
      },
    });
    this.ws = ws;
  }

  retry() {
    if (closing) return;
    const now = Date.now();
    if (this.failures === 0) this.downSince = now;
    const downMs = options.capByOutage ? now - this.downSince : Infinity;
    const delay = reconnectDelayMs(this.failures++, downMs, options.baseMs, options.maxMs);
    setTimeout(() => this.connect(), delay);
  }

  receive(text) {
    let frame;
    try {
      frame = JSON.parse(text);
    } catch {
      return;
    }
    if (frame.type === "count") {
      stats.countFrames++;
      if (this.awaiting.delete(frame.page) && this.awaiting.size === 0) this.joinedAt = Date.now();
    } else if (frame.type === "error") {
      stats.errorFrames++;
      stats.firstError ??= `${frame.code}: ${frame.message}`;
    }
  }
}

/** Opens every tab's first socket, `connectConcurrency` handshakes at a time. */
async function start(o) {
  options = o;
  o.tabs.forEach(([viewer, pages], i) => tabs.push(new Tab(i, viewer, pages)));
  let next = 0;
  const lane = async () => {
    while (next < tabs.length) {
      const tab = tabs[next++];
      tab.connect();
      while (!tab.open && tab.ws !== undefined) await sleep(2);
    }
  };
  await Promise.all(Array.from({ length: o.connectConcurrency }, lane));
  const deadline = performance.now() + FIRST_COUNT_TIMEOUT_MS;
  while (tabs.some((t) => !t.open || t.awaiting.size > 0) && performance.now() < deadline) await sleep(20);
}

function snapshot() {
  let open = 0;
  let joined = 0;
  const openedAt = [];
  const openTookMs = [];
  const joinedAt = [];
  for (const t of tabs) {
    if (!t.open) continue;
    open++;
    openedAt.push(t.openedAt);
    openTookMs.push(t.openTookMs);
    if (t.awaiting.size > 0) continue;
    joined++;
    joinedAt.push(t.joinedAt);
  }
  return { ...stats, tabs: tabs.length, open, joined, openedAt, openTookMs, joinedAt, stalls };
}

/** Tabs open and joined (a first count frame of each page) since `since` (epoch ms), and the last of them. */
function back(since) {
  let joined = 0;
  let lastJoinedAt = 0;
  for (const t of tabs) {
    if (!t.open || t.awaiting.size > 0 || t.openedAt < since) continue;
    joined++;
    lastJoinedAt = Math.max(lastJoinedAt, t.joinedAt);
  }
  return { joined, lastJoinedAt };
}

process.on("message", (msg) => {
  switch (msg?.cmd) {
    case "start":
      start(msg.options).then(
        () =>
          process.send({
            type: "opened",
            ...snapshot(),
            openedAt: undefined,
            openTookMs: undefined,
            joinedAt: undefined,
            stalls: undefined,
          }),
        (err) => process.send({ type: "error", message: String(err?.stack ?? err) }),
      );
      break;
    case "stats":
      process.send({ type: "stats", ...snapshot() });
      break;
    case "back":
      process.send({ type: "back", ...back(msg.since) });
      break;
    case "close":
      closing = true;
      for (const t of tabs) t.ws?.terminate();
      process.send({ type: "closed" });
      break;
  }
});
process.on("disconnect", () => process.exit(0));
