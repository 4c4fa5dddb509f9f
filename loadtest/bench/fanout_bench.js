/**
 * Benchmark (c): page updates delivered per CPU-second of the gateway process, against a Socket.IO
 * server doing the same job in the same run.
 *
 * livecount: nats-server, redis-server, one counter node and one gateway (apps/gateway/dist/main.js),
 * each its own process. N watcher sockets (viewer driver workers on 127.0.0.x) watch a small set of
 * pages; HTTP PUTs add likes to every page at a fixed rate (below one change per coalescing window,
 * so every change is one page update for both servers). livecount's watchers negotiate `counts`
 * frames (`--set counts=0`: protocol v1 count frames), so one frame carries every page of the socket
 * that changed in a window; a page update is one page's value received: one per page of a counts
 * frame, one per count frame, one per Socket.IO message.
 * Gateway CPU is read from /proc/<pid>/stat over a fixed window; the same for the Socket.IO server
 * (loadtest/bench/socketio_server.js, rooms per page, socket.io-client with websocket transport).
 * At the end every watcher must have seen its page's final value.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { startFleet } from "../driver/viewers.js";
import { startChanges } from "./lib/changes.js";
import { cpuTimes, metricSum, round, scrape } from "./lib/measure.js";
import {
  ask,
  benchDir,
  forkHelper,
  freePort,
  spawnProduct,
  startNats,
  startRedis,
  trackChild,
  waitHttp,
} from "./lib/processes.js";

/**
 * With LC_BENCH_PERF_DIR set, records the server with `perf record -g` during the measured window
 * (`perf report -i <dir>/<name>.perf.data` afterwards): where its CPU time goes, kernel included.
 */
function startPerf(name, pid, seconds) {
  const dir = process.env.LC_BENCH_PERF_DIR;
  if (!dir) return Promise.resolve();
  const out = join(dir, `${name.replace(/[^a-z0-9]/gi, "")}.perf.data`);
  return new Promise((resolve) => {
    const child = spawn(
      "perf",
      ["record", "-F", "999", "-g", "-p", String(pid), "-o", out, "--", "sleep", String(seconds)],
      {
        stdio: "ignore",
      },
    );
    child.once("exit", resolve);
    child.once("error", (err) => {
      console.error(`perf record failed: ${err.message}`);
      resolve();
    });
  });
}

const SOCKETIO_SERVER = fileURLToPath(new URL("./socketio_server.js", import.meta.url));
const PUBLISHER_KEY = "bench-publisher-key";

export const defaults = {
  sockets: 16_000,
  workers: 4,
  pages: 20,
  /** Pages each socket watches (the widgets of one web page share a socket). */
  pagesPerSocket: 1,
  /** Changes per page per second (at most one in flight per page); 5/s is one per 200 ms, 4 coalescing windows. */
  changesPerPagePerS: 5,
  warmupS: 3,
  measureS: 10,
  /** 1: livecount's watchers negotiate `counts` frames; 0: protocol v1 `count` frames. */
  counts: 1,
  /**
   * When in each change period a page changes: 1, at a place drawn at random (fixed seed) for each
   * page, so which pages change together has nothing to do with which pages a socket watches, as
   * with real pages; 0, in page order, so a socket's pages (consecutive ones) change one right
   * after another and mostly share a coalescing window, which favours counts frames.
   */
  shufflePhases: 1,
};

/**
 * Opens the watchers, drives changes, measures one window and checks delivery.
 * @param {object} t  what is measured: {name, client, wsUrl, httpUrl, serverPid, key?, metricsUrl?}
 */
async function measure(t, o, log) {
  const pages = Array.from({ length: o.pages }, (_, i) => `fanout-${i}`);
  const openStarted = performance.now();
  const fleet = await startFleet({
    url: t.wsUrl,
    client: t.client,
    sockets: o.sockets,
    workers: o.workers,
    pages,
    pagesPerSocket: o.pagesPerSocket,
    mode: "watch",
    counter: "likes",
    frames: t.client === "ws" && o.counts !== 0 ? "counts" : "count",
    addrStart: t.addrStart,
    onSpawn: (child, name) => trackChild(child, name),
  });
  try {
    log(
      `fanout/${t.name}: ${fleet.opened.opened}/${o.sockets} watchers open in ` +
        `${((performance.now() - openStarted) / 1000).toFixed(1)} s (${fleet.opened.failed} failed)` +
        `${fleet.opened.firstError ? `, first error: ${fleet.opened.firstError}` : ""}; driving ` +
        `${o.changesPerPagePerS} changes/s on each of ${o.pages} pages`,
    );
    const changes = startChanges({
      baseUrl: t.httpUrl,
      pages,
      perPagePerS: o.changesPerPagePerS,
      key: t.key,
      ...(o.shufflePhases !== 0 ? { phaseSeed: 20_261_123 } : {}),
    });
    await sleep(o.warmupS * 1000);
    const s0 = await fleet.stats();
    const cpu0 = cpuTimes(t.serverPid);
    const m0 = t.metricsUrl ? await scrape(t.metricsUrl) : undefined;
    const puts0 = changes.stats.ok;
    const started = performance.now();
    const perf = startPerf(t.name, t.serverPid, o.measureS);
    await sleep(o.measureS * 1000);
    await perf;
    const s1 = await fleet.stats();
    const cpu1 = cpuTimes(t.serverPid);
    const wall = (performance.now() - started) / 1000;
    const m1 = t.metricsUrl ? await scrape(t.metricsUrl) : undefined;
    const puts1 = changes.stats.ok;
    await changes.stop();
    // Coalescing window + propagation, then every watcher must hold its page's last value.
    await sleep(1000);
    const s2 = await fleet.stats();
    let stale = 0;
    for (const page of pages) {
      const expected = changes.values.get(page);
      const seen = s2.lastByPage[page];
      if (seen === undefined || seen.min !== expected) stale += seen?.sockets ?? 0;
    }
    const frames = s1.countFrames + s1.countsFrames - (s0.countFrames + s0.countsFrames);
    const updates = s1.pageUpdates - s0.pageUpdates;
    const userCpu = cpu1.user - cpu0.user;
    const systemCpu = cpu1.system - cpu0.system;
    const cpu = userCpu + systemCpu;
    const result = {
      watchers: s1.open,
      failedSockets: fleet.opened.failed,
      closedDuringRun: s2.closed,
      changesPerSecond: round((puts1 - puts0) / wall, 1),
      putFailures: changes.stats.failed,
      changesSkippedServerBusy: changes.stats.skipped,
      framesDelivered: frames,
      pageUpdatesDelivered: updates,
      pageUpdatesPerFrame: round(updates / frames, 2),
      pageUpdatesPerWallSecond: Math.round(updates / wall),
      serverCpuSeconds: round(cpu, 2),
      serverUserCpuSeconds: round(userCpu, 2),
      serverSystemCpuSeconds: round(systemCpu, 2),
      serverCpuUtilization: round(cpu / wall, 2),
      userCpuShare: round(userCpu / cpu, 3),
      pageUpdatesPerCpuSecond: Math.round(updates / cpu),
      pageUpdatesPerChange: round(updates / (puts1 - puts0), 1),
      watchersMissingFinalValue: stale,
      errorFrames: s2.errorFrames,
      wrongPageFrames: s2.wrongPage,
    };
    if (m0 !== undefined) {
      const d = (name) => metricSum(m1, name) - metricSum(m0, name);
      result.cpuSecondsFromMetrics = round(d("process_cpu_seconds_total"), 2);
      result.countFramesPublished = d("livecount_gateway_count_frames_published_total");
      result.countsFramesPublished = d("livecount_gateway_counts_frames_published_total");
    }
    return result;
  } finally {
    await fleet.close();
  }
}

export async function fanoutBench(options = {}, log = console.error) {
  const o = { ...defaults, ...options };
  const dir = benchDir("fanout");
  let livecount;
  let socketio;
  {
    const nats = await startNats(dir);
    const redis = await startRedis(dir);
    const procs = [];
    try {
      const counterPort = await freePort();
      const common = { LIVECOUNT_NATS_URL: nats.url, LIVECOUNT_REDIS_URL: redis.url, LIVECOUNT_DC: "dc1" };
      procs.push(
        spawnProduct(
          "counter",
          "apps/counter/dist/main.js",
          { ...common, LIVECOUNT_NODE_ID: "fanout-counter", LIVECOUNT_PORT: String(counterPort) },
          dir,
        ),
      );
      await waitHttp(`http://127.0.0.1:${counterPort}/readyz`, "counter node", procs[0]);
      const port = await freePort();
      const gateway = spawnProduct(
        "gateway",
        "apps/gateway/dist/main.js",
        {
          ...common,
          LIVECOUNT_NODE_ID: "fanout-gateway",
          LIVECOUNT_PORT: String(port),
          LIVECOUNT_HOST: "127.0.0.1",
          LIVECOUNT_PUBLISHER_KEYS: PUBLISHER_KEY,
        },
        dir,
      );
      procs.push(gateway);
      await waitHttp(`http://127.0.0.1:${port}/readyz`, "gateway", gateway);
      log(`fanout/livecount: gateway ready (pid ${gateway.pid}); opening ${o.sockets} watchers`);
      livecount = await measure(
        {
          name: "livecount",
          client: "ws",
          wsUrl: `ws://127.0.0.1:${port}/ws`,
          httpUrl: `http://127.0.0.1:${port}`,
          serverPid: gateway.pid,
          key: PUBLISHER_KEY,
          metricsUrl: `http://127.0.0.1:${port}/metrics`,
          addrStart: 10,
        },
        o,
        log,
      );
    } finally {
      for (const p of procs.reverse()) await p.stop();
      await nats.stop();
      await redis.stop();
    }
  }
  {
    const port = await freePort();
    const server = forkHelper("socketio-server", SOCKETIO_SERVER, [], dir, { PORT: String(port) });
    try {
      await ask(server, undefined, "listening", 15_000);
      log(`fanout/socket.io: server ready (pid ${server.pid}); opening ${o.sockets} watchers`);
      socketio = await measure(
        {
          name: "socket.io",
          client: "socketio",
          wsUrl: `http://127.0.0.1:${port}`,
          httpUrl: `http://127.0.0.1:${port}`,
          serverPid: server.pid,
          addrStart: 30,
        },
        o,
        log,
      );
    } finally {
      await server.stop();
    }
  }
  const ratio = round(livecount.pageUpdatesPerCpuSecond / socketio.pageUpdatesPerCpuSecond, 1);
  const goals =
    o.pagesPerSocket > 1
      ? {
          vsSocketIo: {
            goal: ">= 10x Socket.IO (page updates per server CPU-second)",
            met: livecount.pageUpdatesPerCpuSecond >= 10 * socketio.pageUpdatesPerCpuSecond,
            value: livecount.pageUpdatesPerCpuSecond,
            baseline: socketio.pageUpdatesPerCpuSecond,
            ratio,
            unit: "page updates / server CPU-second",
          },
        }
      : {
          // One page per socket is one frame per socket per change: the kernel's sends are the limit.
          userCpuShare: {
            goal: "<= 10% of the gateway's CPU is user CPU",
            met: livecount.userCpuShare <= 0.1,
            value: livecount.userCpuShare,
            unit: "share of the gateway's CPU seconds",
          },
        };
  return {
    config: o,
    livecount,
    socketio,
    ratioPageUpdatesPerCpuSecond: ratio,
    goals: {
      ...goals,
      delivered: {
        goal: "0 watchers missing the final value",
        met: livecount.watchersMissingFinalValue === 0 && socketio.watchersMissingFinalValue === 0,
        value: livecount.watchersMissingFinalValue,
        baseline: socketio.watchersMissingFinalValue,
      },
    },
  };
}
