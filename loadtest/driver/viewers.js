#!/usr/bin/env node
/**
 * The Node viewer driver: many WebSocket viewers spread over worker processes, each worker on its
 * own loopback source address 127.0.0.x (one process stays under the 20,000 open-file limit, one
 * address under its ~28k ephemeral ports). Viewers join (or watch) pages, optionally churn, and the
 * driver prints open sockets, page updates per second and join -> first count latency.
 *
 *   node loadtest/driver/viewers.js --url ws://127.0.0.1:8080/ws --sockets 10000 --workers 4 \
 *     --pages 100 --mode join --churn 50 --duration 30
 *
 * Options (all optional):
 *   --url ws://127.0.0.1:8080/ws   gateway WebSocket URL (http://host:port for --client socketio)
 *   --client ws|socketio           protocol v1 over `ws`, or the Socket.IO baseline's events
 *   --frames count|counts          `ws`: count frames, or negotiate livecount.counts (one frame per window)
 *   --sockets 1000                 sockets in total
 *   --workers 4                    worker processes (each <= 19,000 sockets)
 *   --pages 100                    pages page-0..page-(n-1), assigned round robin
 *   --page-prefix page-            page id prefix
 *   --pages-per-socket 1           pages each socket joins or watches (widgets sharing one socket)
 *   --mode join|watch              count as a viewer (join) or only watch
 *   --churn 0                      sockets per second (over all workers) that leave and join the next page
 *   --duration 30                  seconds to stay before closing (0: until Ctrl-C)
 *   --addr-start 10                first source address is 127.0.0.<addr-start>
 *   --concurrency 100              handshakes in flight per worker
 *
 * The bench (loadtest/bench/run.js) uses the exported `startFleet`.
 */
import { fork } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const WORKER = fileURLToPath(new URL("./viewer_worker.js", import.meta.url));
/** Leaves room under the per-process open-file limit of 20,000 for the runtime's own descriptors. */
export const MAX_SOCKETS_PER_WORKER = 19_000;

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

function request(child, msg, type, timeoutMs = 180_000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => done(new Error(`viewer worker: no ${type} in ${timeoutMs} ms`)),
      timeoutMs,
    );
    const onMessage = (reply) => {
      if (reply?.type === "error") done(new Error(`viewer worker: ${reply.message}`));
      else if (reply?.type === type) done(undefined, reply);
    };
    const onExit = (code) => done(new Error(`viewer worker exited (${code}) before ${type}`));
    const done = (err, value) => {
      clearTimeout(timer);
      child.off("message", onMessage);
      child.off("exit", onExit);
      if (err) reject(err);
      else resolve(value);
    };
    child.on("message", onMessage);
    child.once("exit", onExit);
    child.send(msg);
  });
}

/** Sums worker stats; latencies are concatenated, lastByPage merged. */
function aggregate(replies) {
  const total = {
    opened: 0,
    complete: 0,
    failed: 0,
    closed: 0,
    open: 0,
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
    latencies: [],
    lastByPage: {},
  };
  for (const r of replies) {
    for (const k of [
      "opened",
      "complete",
      "failed",
      "closed",
      "open",
      "frames",
      "countFrames",
      "countsFrames",
      "pageUpdates",
      "errorFrames",
    ]) {
      total[k] += r[k] ?? 0;
    }
    for (const k of ["badFrames", "wrongPage", "lateFrames", "joins"]) total[k] += r[k] ?? 0;
    total.firstError ??= r.firstError;
    for (const x of r.latencies ?? []) total.latencies.push(x);
    for (const [page, e] of Object.entries(r.lastByPage ?? {})) {
      const t = (total.lastByPage[page] ??= { min: Infinity, max: -Infinity, sockets: 0 });
      t.min = Math.min(t.min, e.min);
      t.max = Math.max(t.max, e.max);
      t.sockets += e.sockets;
    }
  }
  return total;
}

/** count, p50, p99, max of join -> first count latencies (ms). */
export function latencySummary(latencies) {
  const sorted = Float64Array.from(latencies).sort();
  return {
    count: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.length > 0 ? sorted[sorted.length - 1] : NaN,
  };
}

/**
 * Starts `workers` processes holding `sockets` sockets in total and resolves once every socket is
 * open and has had its first count frame (or failed).
 *
 * @param {object} o
 * @param {string} o.url
 * @param {"ws"|"socketio"} [o.client]
 * @param {number} o.sockets
 * @param {number} [o.workers]
 * @param {string[]} o.pages
 * @param {number} [o.pageOffset]     the first socket's page index (default 0)
 * @param {number} [o.pagesPerSocket]
 * @param {"join"|"watch"} [o.mode]
 * @param {string} [o.viewerPrefix]
 * @param {number} [o.churnPerS]
 * @param {number} [o.addrStart]      first source address 127.0.0.<addrStart>
 * @param {number} [o.connectConcurrency]
 * @param {string} [o.counter]        a counter to track the last value of, per page
 * @param {"count"|"counts"} [o.frames]  `ws` client: count frames, or negotiated counts frames
 * @param {(child: import("node:child_process").ChildProcess, name: string) => void} [o.onSpawn]
 */
export async function startFleet(o) {
  const workers = o.workers ?? Math.max(1, Math.ceil(o.sockets / 5000));
  const perWorker = Math.ceil(o.sockets / workers);
  if (perWorker > MAX_SOCKETS_PER_WORKER) {
    throw new Error(`${perWorker} sockets per worker is over ${MAX_SOCKETS_PER_WORKER}: add workers`);
  }
  const children = [];
  const opening = [];
  let assigned = 0;
  for (let w = 0; w < workers; w++) {
    const sockets = Math.min(perWorker, o.sockets - assigned);
    if (sockets <= 0) break;
    const child = fork(WORKER, [], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
    o.onSpawn?.(child, `viewer-worker-${w}`);
    children.push(child);
    opening.push(
      request(
        child,
        {
          cmd: "start",
          options: {
            id: w,
            url: o.url,
            client: o.client ?? "ws",
            localAddress: `127.0.0.${(o.addrStart ?? 10) + w}`,
            sockets,
            pages: o.pages,
            pageOffset: (o.pageOffset ?? 0) + assigned,
            pagesPerSocket: o.pagesPerSocket ?? 1,
            mode: o.mode ?? "join",
            viewerPrefix: o.viewerPrefix ?? "lt-",
            connectConcurrency: o.connectConcurrency ?? 100,
            churnPerS: (o.churnPerS ?? 0) / workers,
            counter: o.counter,
            frames: o.frames ?? "count",
          },
        },
        "opened",
      ),
    );
    assigned += sockets;
  }
  const opened = aggregate(await Promise.all(opening));
  return {
    opened,
    workers: children.length,
    pids: children.map((c) => c.pid),
    /** Counters since start; latencies since the previous call. */
    async stats() {
      return aggregate(await Promise.all(children.map((c) => request(c, { cmd: "stats" }, "stats"))));
    },
    async close() {
      await Promise.all(children.map((c) => request(c, { cmd: "close" }, "closed").catch(() => {})));
      for (const c of children) c.kill();
    },
  };
}

async function main() {
  const { values } = parseArgs({
    options: {
      url: { type: "string", default: "ws://127.0.0.1:8080/ws" },
      client: { type: "string", default: "ws" },
      frames: { type: "string", default: "count" },
      sockets: { type: "string", default: "1000" },
      workers: { type: "string" },
      pages: { type: "string", default: "100" },
      "page-prefix": { type: "string", default: "page-" },
      "pages-per-socket": { type: "string", default: "1" },
      mode: { type: "string", default: "join" },
      churn: { type: "string", default: "0" },
      duration: { type: "string", default: "30" },
      "addr-start": { type: "string", default: "10" },
      concurrency: { type: "string", default: "100" },
    },
  });
  const sockets = Number(values.sockets);
  const pages = Array.from({ length: Number(values.pages) }, (_, i) => `${values["page-prefix"]}${i}`);
  const children = [];
  const stop = () => {
    for (const c of children) c.kill("SIGKILL");
    process.exit(130);
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  const started = Date.now();
  const fleet = await startFleet({
    url: values.url,
    client: values.client,
    frames: values.frames,
    sockets,
    workers: values.workers === undefined ? undefined : Number(values.workers),
    pages,
    pagesPerSocket: Number(values["pages-per-socket"]),
    mode: values.mode,
    churnPerS: Number(values.churn),
    addrStart: Number(values["addr-start"]),
    connectConcurrency: Number(values.concurrency),
    onSpawn: (child) => children.push(child),
  });
  const lat = latencySummary(fleet.opened.latencies);
  console.log(
    `opened ${fleet.opened.opened}/${sockets} sockets (${fleet.opened.failed} failed) over ${fleet.workers} ` +
      `workers in ${((Date.now() - started) / 1000).toFixed(1)} s; join->first count ms ` +
      `p50 ${lat.p50.toFixed(1)} p99 ${lat.p99.toFixed(1)} max ${lat.max.toFixed(1)}` +
      (fleet.opened.firstError ? `; first error: ${fleet.opened.firstError}` : ""),
  );
  const duration = Number(values.duration);
  const until = duration > 0 ? Date.now() + duration * 1000 : Infinity;
  let previous = await fleet.stats();
  let last = Date.now();
  while (Date.now() < until) {
    await sleep(1000);
    const s = await fleet.stats();
    const now = Date.now();
    const l = latencySummary(s.latencies);
    const rate = ((s.pageUpdates - previous.pageUpdates) * 1000) / (now - last);
    console.log(
      `open ${s.open} closed ${s.closed} | page updates ${Math.round(rate)}/s (total ${s.pageUpdates}, ` +
        `in ${s.countFrames + s.countsFrames} frames) | ` +
        `errors ${s.errorFrames} bad ${s.badFrames + s.wrongPage}` +
        (l.count > 0
          ? ` | joins ${l.count}: first count p50 ${l.p50.toFixed(1)} p99 ${l.p99.toFixed(1)} ms`
          : ""),
    );
    previous = s;
    last = now;
  }
  const final = await fleet.stats();
  await fleet.close();
  const { latencies: _latencies, lastByPage: _lastByPage, ...summary } = final;
  console.log(JSON.stringify({ summary, joinToFirstCountMs: lat }));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
