/**
 * What the benchmarks read from other processes: CPU time and RSS from /proc, Prometheus metrics
 * over HTTP, Redis INFO, and percentiles.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import WebSocket from "ws";
import { BENCH_ADMIN_KEY } from "./processes.js";

let clockTicks;
function ticksPerSecond() {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

/** User + system CPU seconds a process has used so far (/proc/<pid>/stat utime + stime). */
export function cpuSeconds(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // The command name is in parentheses and may contain spaces: fields start after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
  return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond();
}

/** {user, system} CPU seconds of a process so far. */
export function cpuTimes(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return { user: Number(fields[11]) / ticksPerSecond(), system: Number(fields[12]) / ticksPerSecond() };
}

/** Resident set size of a process in bytes (/proc/<pid>/status VmRSS). */
export function rssBytes(pid) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(status);
  if (m === null) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]) * 1024;
}

/** Open file descriptors of a process. */
export function openFds(pid) {
  return Number(
    execFileSync("sh", ["-c", `ls /proc/${pid}/fd | wc -l`])
      .toString()
      .trim(),
  );
}

/**
 * Scrapes a Prometheus text endpoint into `name{labels}` -> value (sums nothing; a metric with
 * labels keeps one key per label set).
 */
export async function scrape(url) {
  const res = await globalThis.fetch(url, { headers: { authorization: `Bearer ${BENCH_ADMIN_KEY}` } });
  if (res.status !== 200) throw new Error(`${url} answered ${res.status}`);
  const text = await res.text();
  const values = new Map();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    values.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return values;
}

/** Sum of every series of `name` (any labels). */
export function metricSum(values, name) {
  let sum = 0;
  for (const [key, value] of values) if (key === name || key.startsWith(`${name}{`)) sum += value;
  return sum;
}

/** INFO stats + commandstats of a Redis (ioredis client): total commands and calls per command. */
export async function redisStats(redis) {
  const stats = await redis.info("stats");
  const commands = await redis.info("commandstats");
  const field = (name) => Number(new RegExp(`^${name}:(\\d+)`, "m").exec(stats)?.[1] ?? NaN);
  const calls = {};
  for (const m of commands.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[m[1]] = Number(m[2]);
  return {
    totalCommands: field("total_commands_processed"),
    instantaneousOps: field("instantaneous_ops_per_sec"),
    calls,
  };
}

/** Per-command call deltas between two `redisStats`, largest first, zeros left out. */
export function callDeltas(before, after) {
  const out = {};
  const names = new Set([...Object.keys(before.calls), ...Object.keys(after.calls)]);
  for (const name of names) {
    const d = (after.calls[name] ?? 0) - (before.calls[name] ?? 0);
    if (d > 0) out[name] = d;
  }
  return Object.fromEntries(Object.entries(out).sort((a, b) => b[1] - a[1]));
}

/** p-th percentile (0..100) of numbers, nearest rank. */
export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}

/** count, p50, p90, p99, max of a list of numbers. */
export function summarize(samples) {
  const sorted = Float64Array.from(samples).sort();
  return {
    count: sorted.length,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: sorted.length > 0 ? sorted[sorted.length - 1] : NaN,
  };
}

/** Rounds for display and JSON: 3 significant decimals below 10, fewer above. */
export function round(x, digits = 3) {
  if (!Number.isFinite(x)) return x;
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/**
 * A session on the inspector protocol of another Node process started with
 * `--inspect=127.0.0.1:<port>`: `call(method, params)` resolves with the result; every event goes to
 * `onEvent(method, params)`.
 */
export async function inspectorSession(inspectPort, onEvent = () => {}) {
  const targets = await (await globalThis.fetch(`http://127.0.0.1:${inspectPort}/json/list`)).json();
  const ws = new WebSocket(targets[0].webSocketDebuggerUrl, { maxPayload: 2 ** 30 });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  const pending = new Map();
  ws.on("message", (data) => {
    const msg = JSON.parse(data.toString());
    if (msg.id === undefined) onEvent(msg.method, msg.params);
    else {
      pending.get(msg.id)?.(msg.result);
      pending.delete(msg.id);
    }
  });
  let id = 0;
  return {
    call: (method, params = {}) =>
      new Promise((resolve) => {
        pending.set(++id, resolve);
        ws.send(JSON.stringify({ id, method, params }));
      }),
    close: () => ws.close(),
  };
}

/** Forces a full garbage collection in another Node process, over the inspector protocol. */
export async function forceGc(inspectPort) {
  const session = await inspectorSession(inspectPort);
  // Twice: the first pass may leave objects only the second can free (weak references, finalizers).
  await session.call("HeapProfiler.collectGarbage");
  await session.call("HeapProfiler.collectGarbage");
  session.close();
}

/**
 * `process.memoryUsage()` of another Node process (rss, heapTotal, heapUsed, external, arrayBuffers;
 * bytes), read over the inspector protocol.
 */
export async function memoryUsageOf(inspectPort) {
  const session = await inspectorSession(inspectPort);
  const reply = await session.call("Runtime.evaluate", {
    expression: "process.memoryUsage()",
    returnByValue: true,
  });
  session.close();
  return reply.result.value;
}

/**
 * Resident bytes of a process by mapping (/proc/<pid>/smaps): "[heap]" (the brk heap: malloc's main
 * arena), "[anon]" (anonymous maps: V8's heap pages, malloc's other arenas and large blocks), and
 * "file" (code and data of binaries and libraries).
 */
export function rssByMapping(pid) {
  const out = { "[heap]": 0, "[anon]": 0, file: 0, other: 0 };
  let kind = "other";
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head !== null) {
      const name = head[1];
      kind = name === "" ? "[anon]" : name === "[heap]" ? "[heap]" : name.startsWith("/") ? "file" : "other";
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB$/.exec(line);
    if (rss !== null) out[kind] += Number(rss[1]) * 1024;
  }
  return out;
}
