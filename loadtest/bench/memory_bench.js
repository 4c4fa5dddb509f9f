/**
 * Benchmark (d): gateway memory per idle subscribed viewer. A real gateway process (with a counter
 * node, nats-server and redis-server) is warmed up with a few sockets that come and go, then N
 * sockets (viewer driver workers on 127.0.0.x) join pages and stay idle. The RSS of the gateway
 * process (/proc/<pid>/status VmRSS) with 0 and with N sockets, divided by N, is the cost of one
 * idle viewer. Before each reading the process gets two full GCs, forced from outside over the
 * inspector protocol (it runs with --inspect on a loopback port, both times), so garbage does not
 * count; V8 heap figures (process.memoryUsage(), read over the inspector) are reported alongside.
 *
 * The baseline is the floor: a bare uWS server with the gateway's socket settings
 * (bare_uws_server.js), measured the same way with the same N sockets, each joined to one page's
 * topic. The difference is what livecount adds per viewer.
 *
 * `--set census=1` also prints what the gateway's V8 heap grew by per viewer, by kind of object
 * (two heap snapshots; the snapshots themselves cost RSS, so that run's RSS figures are inflated).
 */
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { startFleet } from "../driver/viewers.js";
import { censusGrowth, heapCensus } from "./lib/heap_census.js";
import { forceGc, memoryUsageOf, openFds, round, rssByMapping, rssBytes } from "./lib/measure.js";
import {
  benchDir,
  freePort,
  spawnProduct,
  startCounterNode,
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
  /** 1: also print what the V8 heap grew by per viewer, by kind of object (two heap snapshots). */
  census: 0,
  /** 0: skip the bare uWS floor. */
  floor: 1,
  /** 1: the viewers negotiate `counts` frames (as the widget does); 0: protocol v1 `count` frames. */
  counts: 0,
};

const GOAL_BYTES = 1200;

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

function inspectPortOf(proc) {
  const port = Number(
    /Debugger listening on ws:\/\/127\.0\.0\.1:(\d+)\//.exec(readFileSync(proc.logPath, "utf8"))?.[1],
  );
  if (!port) throw new Error(`inspector port not found in ${proc.logPath}`);
  return port;
}

/**
 * What one idle joined viewer costs the server `proc` (started with --inspect) at `url`: warm-up
 * sockets come and go, then `o.sockets` join in two halves and stay; RSS and heap before and after.
 */
async function idleViewerCost(name, proc, url, o, log) {
  const inspectPort = inspectPortOf(proc);
  const pages = Array.from({ length: o.pages }, (_, i) => `memory-${i}`);
  const onSpawn = (child, worker) => trackChild(child, worker);
  // The floor (a bare uWS server) speaks protocol v1 only.
  const frames = name === "gateway" && o.counts === 1 ? "counts" : "count";
  // Warm-up: the same code paths (upgrade, join, first frame, leave on close) run once before.
  const warm = await startFleet({
    url,
    sockets: o.warmupSockets,
    workers: 1,
    pages,
    viewerPrefix: "warm-",
    addrStart: 50,
    frames,
    onSpawn,
  });
  await warm.close();
  await sleep(o.settleS * 1000);
  const rss0 = await sampleRss(proc.pid, inspectPort);
  const heap0 = await memoryUsageOf(inspectPort);
  const maps0 = rssByMapping(proc.pid);
  const census0 = o.census && name === "gateway" ? await heapCensus(inspectPort) : undefined;
  log(
    `memory: ${name} (pid ${proc.pid}) RSS ${(rss0 / 2 ** 20).toFixed(1)} MiB with 0 sockets; opening ${o.sockets}`,
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
          frames,
          mode: "join",
          viewerPrefix: `idle${i}-`,
          addrStart: 60 + i * o.workers,
          onSpawn,
        }),
      );
      await sleep(o.settleS * 1000);
      const open = (await Promise.all(halves.map((f) => f.stats()))).reduce((a, b) => a + b.open, 0);
      const rss = await sampleRss(proc.pid, inspectPort);
      readings.push({ open, rss, heap: await memoryUsageOf(inspectPort) });
      log(`memory: ${name}: ${open} idle viewers joined; RSS ${(rss / 2 ** 20).toFixed(1)} MiB`);
    }
    const [mid, end] = readings;
    const n = end.open;
    const maps = rssByMapping(proc.pid);
    log(
      `memory: ${name}: RSS growth per viewer by mapping: ` +
        Object.keys(maps)
          .map((k) => `${k} ${Math.round((maps[k] - maps0[k]) / n)} B`)
          .join(", "),
    );
    if (census0 !== undefined) {
      log("memory: V8 heap growth per viewer (bytes, objects, kind):");
      for (const [key, count, bytes] of censusGrowth(census0, await heapCensus(inspectPort), n))
        log(`  ${String(bytes).padStart(6)} ${String(count).padStart(6)}  ${key}`);
    }
    return {
      viewers: n,
      socketsWithFirstCount: halves.reduce((a, f) => a + f.opened.complete, 0),
      failedSockets: halves.reduce((a, f) => a + f.opened.failed, 0),
      openFds: openFds(proc.pid),
      rssBeforeMiB: round(rss0 / 2 ** 20, 1),
      rssHalfMiB: round(mid.rss / 2 ** 20, 1),
      rssAfterMiB: round(end.rss / 2 ** 20, 1),
      rssPerViewerBytes: Math.round((end.rss - rss0) / n),
      rssPerViewerSecondHalfBytes: Math.round((end.rss - mid.rss) / (end.open - mid.open)),
      heapUsedPerViewerBytes: Math.round((end.heap.heapUsed - heap0.heapUsed) / n),
      heapTotalPerViewerBytes: Math.round((end.heap.heapTotal - heap0.heapTotal) / n),
      externalPerViewerBytes: Math.round((end.heap.external - heap0.external) / n),
    };
  } finally {
    for (const f of halves) await f.close();
  }
}

async function gatewayCost(o, log) {
  const dir = benchDir("memory");
  const nats = await startNats(dir);
  const redis = await startRedis(dir);
  const procs = [];
  try {
    const common = { LIVECOUNT_NATS_URL: nats.url, LIVECOUNT_REDIS_URL: redis.url, LIVECOUNT_DC: "dc1" };
    procs.push(await startCounterNode(dir, "memory-counter", common));
    const port = await freePort();
    const gateway = spawnProduct(
      "gateway",
      "apps/gateway/dist/main.js",
      {
        ...common,
        LIVECOUNT_NODE_ID: "memory-gateway",
        LIVECOUNT_PORT: String(port),
        LIVECOUNT_HOST: "127.0.0.1",
        // Room for every socket of the run (the default, 18,000, leaves headroom under 20,000 files).
        LIVECOUNT_MAX_CONNECTIONS: String(o.sockets + o.warmupSockets),
      },
      dir,
      ["--inspect=127.0.0.1:0"],
    );
    procs.push(gateway);
    await waitHttp(`http://127.0.0.1:${port}/readyz`, "gateway", gateway);
    return await idleViewerCost("gateway", gateway, `ws://127.0.0.1:${port}/ws`, o, log);
  } finally {
    for (const p of procs.reverse()) await p.stop();
    await nats.stop();
    await redis.stop();
  }
}

async function floorCost(o, log) {
  const dir = benchDir("memory-floor");
  const port = await freePort();
  const server = spawnProduct(
    "bare-uws",
    "loadtest/bench/bare_uws_server.js",
    { BENCH_PORT: String(port) },
    dir,
    ["--inspect=127.0.0.1:0"],
  );
  try {
    await waitHttp(`http://127.0.0.1:${port}/`, "bare uWS server", server);
    return await idleViewerCost("bare uWS", server, `ws://127.0.0.1:${port}/ws`, o, log);
  } finally {
    await server.stop();
  }
}

export async function memoryBench(options = {}, log = console.error) {
  const o = { ...defaults, ...options };
  const gateway = await gatewayCost(o, log);
  const floor = o.floor ? await floorCost(o, log) : undefined;
  const value = gateway.rssPerViewerBytes;
  return {
    config: o,
    ...gateway,
    floor,
    goals: {
      rssPerViewer: {
        goal: `<= ${GOAL_BYTES} bytes`,
        met: value <= GOAL_BYTES,
        value,
        ...(floor !== undefined
          ? { baseline: floor.rssPerViewerBytes, ratio: round(value / floor.rssPerViewerBytes, 2) }
          : {}),
        unit: "bytes of gateway RSS per idle joined viewer",
      },
    },
  };
}
