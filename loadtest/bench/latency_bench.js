/**
 * Benchmark (e): join on gateway A -> count visible to a watcher on gateway B. Two gateways and one
 * counter node over NATS (plus Redis), each its own process. One watcher per page on B; a pool of
 * sockets on A joins the pages with fresh viewer ids at a steady rate, each join timestamped. The
 * k-th join of a page is visible when B's watcher gets a count frame with viewers >= k (counts only
 * grow here: no leaves). Both ends live in this process, so one clock times them.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import WebSocket from "ws";
import { round, summarize } from "./lib/measure.js";
import { benchDir, freePort, spawnProduct, startNats, startRedis, waitHttp } from "./lib/processes.js";

export const defaults = {
  pages: 30,
  /** Sockets on gateway A that send the joins; each joins each page at most once. */
  joiners: 100,
  joins: 2000,
  joinsPerS: 200,
  coalesceMs: 50,
};

function open(url, localAddress) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { localAddress, perMessageDeflate: false });
    ws.once("open", () => resolve(ws));
    ws.once("error", reject);
  });
}

export async function latencyBench(options = {}, log = console.error) {
  const o = { ...defaults, ...options };
  if (o.joins > o.pages * o.joiners) throw new Error("joins must be <= pages * joiners");
  const dir = benchDir("latency");
  const nats = await startNats(dir);
  const redis = await startRedis(dir);
  const procs = [];
  const sockets = [];
  try {
    const common = {
      LIVECOUNT_NATS_URL: nats.url,
      LIVECOUNT_REDIS_URL: redis.url,
      LIVECOUNT_DC: "dc1",
      LIVECOUNT_COALESCE_MS: String(o.coalesceMs),
    };
    const counterPort = await freePort();
    const counter = spawnProduct(
      "counter",
      "apps/counter/dist/main.js",
      { ...common, LIVECOUNT_NODE_ID: "latency-counter", LIVECOUNT_PORT: String(counterPort) },
      dir,
    );
    procs.push(counter);
    await waitHttp(`http://127.0.0.1:${counterPort}/readyz`, "counter node", counter);
    const ports = [];
    for (const name of ["a", "b"]) {
      const port = await freePort();
      const gateway = spawnProduct(
        `gateway-${name}`,
        "apps/gateway/dist/main.js",
        { ...common, LIVECOUNT_NODE_ID: `latency-gateway-${name}`, LIVECOUNT_PORT: String(port) },
        dir,
      );
      procs.push(gateway);
      await waitHttp(`http://127.0.0.1:${port}/readyz`, `gateway ${name}`, gateway);
      ports.push(port);
    }
    const [urlA, urlB] = ports.map((p) => `ws://127.0.0.1:${p}/ws`);
    const pages = Array.from({ length: o.pages }, (_, i) => `latency-${i}`);

    // Watchers on B: one per page.
    /** page -> send times of its joins, in order (index k-1 for the k-th join) */
    const sentAt = new Map(pages.map((p) => [p, []]));
    /** page -> how many joins are already seen */
    const seen = new Map(pages.map((p) => [p, 0]));
    const latencies = [];
    let lastViewers = new Map();
    const firstFrame = new Map();
    for (const page of pages) {
      const ws = await open(urlB, "127.0.0.90");
      sockets.push(ws);
      ws.on("message", (data) => {
        const now = performance.now();
        const frame = JSON.parse(data.toString());
        if (frame.type !== "count" || frame.page !== page) return;
        firstFrame.get(page)?.();
        lastViewers.set(page, frame.viewers);
        const times = sentAt.get(page);
        let k = seen.get(page);
        while (k < frame.viewers && k < times.length) latencies.push(now - times[k++]);
        seen.set(page, k);
      });
      await new Promise((resolve) => {
        firstFrame.set(page, resolve);
        ws.send(JSON.stringify({ type: "watch", page }));
      });
      firstFrame.delete(page);
    }
    // Joiners on A.
    const joiners = [];
    for (let i = 0; i < o.joiners; i++) {
      const ws = await open(urlA, "127.0.0.91");
      ws.on("message", () => {});
      joiners.push(ws);
      sockets.push(ws);
    }
    await sleep(500);
    log(
      `latency: ${o.joins} joins at ${o.joinsPerS}/s over ${o.pages} pages on gateway A, ` +
        `watched on gateway B (LIVECOUNT_COALESCE_MS=${o.coalesceMs})`,
    );
    // Join n: page n % pages, socket floor(n / pages), so no socket joins a page twice.
    const intervalMs = 1000 / o.joinsPerS;
    const started = performance.now();
    for (let n = 0; n < o.joins; n++) {
      const due = started + n * intervalMs;
      const wait = due - performance.now();
      if (wait > 1) await sleep(wait);
      const page = pages[n % o.pages];
      const ws = joiners[Math.floor(n / o.pages) % o.joiners];
      sentAt.get(page).push(performance.now());
      ws.send(JSON.stringify({ type: "join", page, viewer: `lat-${n}` }));
    }
    const deadline = performance.now() + 5000;
    while (latencies.length < o.joins && performance.now() < deadline) await sleep(20);
    const s = summarize(latencies);
    const wrongCounts = pages.filter((p) => lastViewers.get(p) !== sentAt.get(p).length).length;
    const goalMs = 50 + o.coalesceMs;
    return {
      config: o,
      joins: o.joins,
      seen: latencies.length,
      pagesWithWrongFinalCount: wrongCounts,
      coalesceMs: o.coalesceMs,
      p50Ms: round(s.p50, 1),
      p90Ms: round(s.p90, 1),
      p99Ms: round(s.p99, 1),
      maxMs: round(s.max, 1),
      goals: {
        p99: {
          goal: `p99 <= ${goalMs} ms (50 + coalescing window)`,
          value: s.p99,
          unit: "ms",
          met: s.p99 <= goalMs,
        },
      },
    };
  } finally {
    for (const ws of sockets) ws.terminate();
    for (const p of procs.reverse()) await p.stop();
    await nats.stop();
    await redis.stop();
  }
}
