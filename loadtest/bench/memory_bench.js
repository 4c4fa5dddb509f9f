/**
 * Benchmark (d): gateway memory per idle subscribed viewer. A real gateway process (with a counter
 * node, nats-server and redis-server) is warmed up with a few sockets that come and go, then N
 * sockets (viewer driver workers on 127.0.0.x) join pages and stay idle. The RSS of the gateway
 * process (/proc/<pid>/status VmRSS) with 0 and with N sockets, divided by N, is the cost of one
 * idle viewer. Before each reading the gateway gets two full GCs, forced from outside over the
 * inspector protocol (it runs with --inspect on a loopback port, both times), so garbage does not
 * count; V8 heap figures from /metrics are reported alongside.
 */
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { startFleet } from "../driver/viewers.js";
import { forceGc, metricSum, openFds, round, rssBytes, scrape } from "./lib/measure.js";
import {
  benchDir,
  freePort,
  spawnProduct,
  startNats,
  startRedis,
  trackChild,
  waitHttp,
} from "./lib/processes.js";

export const defaults = {
  /** The gateway holds one descriptor per socket under a 20,000 limit per process. */
  sockets: 19_000,
  workers: 4,
  pages: 1000,
  warmupSockets: 500,
  settleS: 3,
  /** 1: the viewers negotiate `counts` frames (as the widget does); 0: protocol v1 `count` frames. */
  counts: 0,
};

/** Median RSS over a few samples, after forced GCs. */
async function sampleRss(pid, inspectPort, samples = 5, everyMs = 200) {
  await forceGc(inspectPort);
  await sleep(500);
  const values = [];
  for (let i = 0; i < samples; i++) {
    values.push(rssBytes(pid));
    await sleep(everyMs);
  }
  values.sort((a, b) => a - b);
  return values[Math.floor(values.length / 2)];
}

async function heap(metricsUrl) {
  const m = await scrape(metricsUrl);
  return {
    heapUsed: metricSum(m, "nodejs_heap_size_used_bytes"),
    external: metricSum(m, "nodejs_external_memory_bytes"),
  };
}

export async function memoryBench(options = {}, log = console.error) {
  const o = { ...defaults, ...options };
  const dir = benchDir("memory");
  const nats = await startNats(dir);
  const redis = await startRedis(dir);
  const procs = [];
  try {
    const common = { LIVECOUNT_NATS_URL: nats.url, LIVECOUNT_REDIS_URL: redis.url, LIVECOUNT_DC: "dc1" };
    const counterPort = await freePort();
    const counter = spawnProduct(
      "counter",
      "apps/counter/dist/main.js",
      { ...common, LIVECOUNT_NODE_ID: "memory-counter", LIVECOUNT_PORT: String(counterPort) },
      dir,
    );
    procs.push(counter);
    await waitHttp(`http://127.0.0.1:${counterPort}/readyz`, "counter node", counter);
    const port = await freePort();
    const gateway = spawnProduct(
      "gateway",
      "apps/gateway/dist/main.js",
      {
        ...common,
        LIVECOUNT_NODE_ID: "memory-gateway",
        LIVECOUNT_PORT: String(port),
        LIVECOUNT_HOST: "127.0.0.1",
      },
      dir,
      ["--inspect=127.0.0.1:0"],
    );
    procs.push(gateway);
    await waitHttp(`http://127.0.0.1:${port}/readyz`, "gateway", gateway);
    const inspectPort = Number(
      /Debugger listening on ws:\/\/127\.0\.0\.1:(\d+)\//.exec(readFileSync(gateway.logPath, "utf8"))?.[1],
    );
    if (!inspectPort) throw new Error(`gateway inspector port not found in ${gateway.logPath}`);
    const url = `ws://127.0.0.1:${port}/ws`;
    const metricsUrl = `http://127.0.0.1:${port}/metrics`;
    const pages = Array.from({ length: o.pages }, (_, i) => `memory-${i}`);
    const onSpawn = (child, name) => trackChild(child, name);

    // Warm-up: the same code paths (upgrade, join, first frame, leave on close) run once before.
    const warm = await startFleet({
      url,
      sockets: o.warmupSockets,
      workers: 1,
      pages,
      viewerPrefix: "warm-",
      addrStart: 50,
      frames: o.counts === 1 ? "counts" : "count",
      onSpawn,
    });
    await warm.close();
    await sleep(o.settleS * 1000);
    const rss0 = await sampleRss(gateway.pid, inspectPort);
    const heap0 = await heap(metricsUrl);
    log(
      `memory: gateway (pid ${gateway.pid}) RSS ${(rss0 / 2 ** 20).toFixed(1)} MiB with 0 sockets; opening ${o.sockets}`,
    );

    // Two halves, so the marginal cost of the second half shows whether the figure is stable.
    const half = Math.floor(o.sockets / 2);
    const halves = [];
    const readings = [];
    try {
      for (const [i, count] of [half, o.sockets - half].entries()) {
        halves.push(
          await startFleet({
            url,
            sockets: count,
            workers: Math.max(1, Math.floor(o.workers / 2)),
            pages,
            pageOffset: i * half,
            frames: o.counts === 1 ? "counts" : "count",
            mode: "join",
            viewerPrefix: `idle${i}-`,
            addrStart: 60 + i * o.workers,
            onSpawn,
          }),
        );
        await sleep(o.settleS * 1000);
        const stats = (await Promise.all(halves.map((f) => f.stats()))).reduce((a, b) => a + b.open, 0);
        readings.push({
          open: stats,
          rss: await sampleRss(gateway.pid, inspectPort),
          heap: await heap(metricsUrl),
        });
        log(`memory: ${stats} idle viewers joined; RSS ${(readings.at(-1).rss / 2 ** 20).toFixed(1)} MiB`);
      }
      const [mid, end] = readings;
      const n = end.open;
      const perViewer = (end.rss - rss0) / n;
      return {
        config: o,
        viewers: n,
        socketsWithFirstCount: halves.reduce((a, f) => a + f.opened.complete, 0),
        failedSockets: halves.reduce((a, f) => a + f.opened.failed, 0),
        gatewayOpenFds: openFds(gateway.pid),
        rssBeforeMiB: round(rss0 / 2 ** 20, 1),
        rssHalfMiB: round(mid.rss / 2 ** 20, 1),
        rssAfterMiB: round(end.rss / 2 ** 20, 1),
        rssPerViewerBytes: Math.round(perViewer),
        rssPerViewerSecondHalfBytes: Math.round((end.rss - mid.rss) / (end.open - mid.open)),
        heapUsedPerViewerBytes: Math.round((end.heap.heapUsed - heap0.heapUsed) / n),
        externalPerViewerBytes: Math.round((end.heap.external - heap0.external) / n),
        goals: { rssPerViewer: { goal: "<= 1536 bytes", met: perViewer <= 1536 } },
      };
    } finally {
      for (const f of halves) await f.close();
    }
  } finally {
    for (const p of procs.reverse()) await p.stop();
    await nats.stop();
    await redis.stop();
  }
}
