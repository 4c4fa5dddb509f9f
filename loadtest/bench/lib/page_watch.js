/**
 * The reconnect-storm benchmark's observer: what every page shows, from outside, as a client would
 * see it. Watcher sockets (protocol v1 `watch`, 64 pages per socket, spread over a few loopback
 * addresses) keep each page's latest count frame and when it arrived; they reopen every 25 ms while
 * the gateway is down, since the observer must not add its own backoff to what it measures. HTTP
 * reads (GET /v1/pages/{page}/counter, keep-alive, over several addresses so the per-address read
 * budget at its default is never the limit) confirm what the watchers saw.
 */
import { Agent, request } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import WebSocket from "ws";

/** The gateway's default LIVECOUNT_MAX_PAGES_PER_SOCKET. */
const PAGES_PER_SOCKET = 64;
const REOPEN_MS = 25;

/**
 * Watches every page of `expected` (page -> {viewers, connections}) on `url` from `addresses`.
 * `exactSince()` is the arrival time of the newest frame once every page's latest frame equals its
 * expected numbers, else undefined.
 */
export function watchPages(url, expected, addresses) {
  const pages = [...expected.keys()];
  /** page -> {viewers, connections, at} of its latest frame */
  const latest = new Map();
  const sockets = [];
  let closed = false;
  for (let i = 0; i * PAGES_PER_SOCKET < pages.length; i++) {
    const mine = pages.slice(i * PAGES_PER_SOCKET, (i + 1) * PAGES_PER_SOCKET);
    const address = addresses[i % addresses.length];
    const open = () => {
      if (closed) return;
      const ws = new WebSocket(url, { localAddress: address, perMessageDeflate: false });
      sockets[i] = ws;
      ws.on("open", () => {
        for (const page of mine) ws.send(JSON.stringify({ type: "watch", page }));
      });
      ws.on("message", (data) => {
        const frame = JSON.parse(data.toString());
        if (frame.type === "count")
          latest.set(frame.page, { viewers: frame.viewers, connections: frame.connections, at: Date.now() });
      });
      ws.on("error", () => {});
      ws.on("close", () => setTimeout(open, REOPEN_MS));
    };
    open();
  }
  return {
    /** Pages whose latest frame differs from what is expected. */
    wrong() {
      let n = 0;
      for (const [page, want] of expected) if (!matches(latest.get(page), want)) n++;
      return n;
    },
    exactSince() {
      let newest = 0;
      for (const [page, want] of expected) {
        const seen = latest.get(page);
        if (!matches(seen, want)) return undefined;
        newest = Math.max(newest, seen.at);
      }
      return newest;
    },
    /** Forgets what was seen (the gateway went away: its frames are history). */
    reset() {
      latest.clear();
    },
    close() {
      closed = true;
      for (const ws of sockets) ws?.terminate();
    },
  };
}

function matches(seen, want) {
  return seen !== undefined && seen.viewers === want.viewers && seen.connections === want.connections;
}

/**
 * Reads every page (or those in `only`) over HTTP (`concurrency` at a time, round robin over
 * `addresses`) and returns
 * the pages whose `viewers` or `connections` differ from `expected`, with what was read.
 */
export async function readPages(baseUrl, expected, addresses, only = undefined, concurrency = 32) {
  const agents = addresses.map((localAddress) => new Agent({ keepAlive: true, localAddress }));
  const pages = only ?? [...expected.keys()];
  const wrong = [];
  let next = 0;
  const lane = async (k) => {
    while (next < pages.length) {
      const page = pages[next++];
      const body = await getJson(
        `${baseUrl}/v1/pages/${encodeURIComponent(page)}/counter`,
        agents[k % agents.length],
      );
      const want = expected.get(page);
      if (body?.viewers !== want.viewers || body?.connections !== want.connections)
        wrong.push({
          page,
          want,
          got: body === undefined ? undefined : { viewers: body.viewers, connections: body.connections },
        });
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, k) => lane(k)));
  for (const a of agents) a.destroy();
  return wrong;
}

function getJson(url, agent) {
  return new Promise((resolve) => {
    const req = request(url, { agent }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (text += c));
      res.on("end", () => {
        try {
          resolve(res.statusCode === 200 ? JSON.parse(text) : undefined);
        } catch {
          resolve(undefined);
        }
      });
    });
    req.on("error", () => resolve(undefined));
    req.setTimeout(5000, () => req.destroy());
    req.end();
  });
}

/** Polls `check` every `everyMs` until it returns a value other than undefined, or `timeoutMs` passes. */
export async function poll(check, everyMs, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined || Date.now() > deadline) return value;
    await sleep(everyMs);
  }
}
