#!/usr/bin/env node
/**
 * `npm test`: the whole suite as two vitest runs side by side, then a third (docs/testing.md).
 *
 * The clusters held to times (a takeover within its leases, a heal within its follow-ups) run one
 * file at a time, at the usual priority; they wait on leases far more than they compute (a quarter
 * of two cores, on average). The files of no cluster run beside them at the lowest CPU priority
 * (nice 19), so they take the cores the clusters leave idle and yield them the moment a cluster
 * needs them: a timed cluster sees the machine as if alone. One after another the two took 651 s on
 * two cores, side by side 347 s. The clusters that bound nothing by a lease come last, on their own.
 *
 * With arguments (`npm test -- apps/gateway`), one plain `vitest run` with them instead.
 */
import { spawn, spawnSync } from "node:child_process";
import { availableParallelism, loadavg, setPriority } from "node:os";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const vitest = fileURLToPath(new URL("../node_modules/vitest/vitest.mjs", import.meta.url));
/**
 * Workers of each run number from 1: the timed run (one worker) takes its ports from the first
 * slice, the rest beside it from the others (ports.ts); the untimed run, alone after both, from any.
 */
const PORT_SLICE_OFFSET = 1;
const LOWEST_PRIORITY = 19;

const args = process.argv.slice(2);
if (args.length > 0) {
  const { status } = spawnSync(process.execPath, [vitest, "run", ...args], {
    cwd: root,
    stdio: "inherit",
  });
  process.exit(status ?? 1);
}

// One build for every run (each would build in its global setup otherwise, over the same output).
if (process.env.LIVECOUNT_TEST_SKIP_BUILD !== "1") {
  const build = spawnSync("npm", ["run", "build", "--silent"], { cwd: root, stdio: "inherit" });
  if (build.status !== 0) process.exit(build.status ?? 1);
}

const env = {
  ...process.env,
  LIVECOUNT_TEST_SKIP_BUILD: "1",
  ...(process.stdout.isTTY && process.env.NO_COLOR === undefined ? { FORCE_COLOR: "1" } : {}),
};

const runs = [
  {
    tag: "timed  ",
    command: process.execPath,
    args: [vitest, "run", "--project", "clusters"],
    env,
  },
  {
    tag: "rest   ",
    command: process.execPath,
    args: [vitest, "run", "--project", "suite"],
    env: { ...env, LIVECOUNT_TEST_PORT_SLICE_OFFSET: String(PORT_SLICE_OFFSET) },
    priority: LOWEST_PRIORITY,
  },
];
/**
 * Once both are done, the clusters that bound nothing by a lease, alone at the usual priority: at
 * nice 19 beside the timed clusters a slow host starved them past their own waits (a counter node
 * not ready in 20 s, a Redis Cluster rebalance past a minute).
 */
const after = {
  tag: "untimed",
  command: process.execPath,
  args: [vitest, "run", "--project", "untimed clusters"],
  env,
};

console.log(
  `npm test: the clusters held to times ("timed") one file at a time, beside the rest ("rest") at nice ${LOWEST_PRIORITY}, then the untimed clusters ("untimed"); each line is tagged with its run`,
);
const startedAt = Date.now();
const children = new Set();
/**
 * The lines naming a failed test or file, by run, printed again once every run is done: in the
 * middle of thousands of interleaved lines they are easy to miss, and a log kept in part loses them.
 */
const failures = [];
// eslint-disable-next-line no-control-regex -- vitest colours its report; the escapes are stripped to match it
const ANSI = /\x1b\[[0-9;]*m/g;
const FAILED_LINE = /^\s*(FAIL|×)\s/;
/** ps's %CPU from which another process is named as load before the runs. */
const BUSY_PERCENT = 20;

/**
 * The timings the suite holds to assume the host is otherwise idle: say how loaded it is, so that
 * a test failed on a busy machine can be told from one failed by the product.
 */
function reportLoad(when) {
  const [one, five] = loadavg();
  console.log(
    `npm test: load average ${one.toFixed(2)} (1 min), ${five.toFixed(2)} (5 min) on ${availableParallelism()} cores ${when}`,
  );
}

/** Names the other processes using a fifth of a core or more over their lifetime (ps's %CPU). */
function reportBusyProcesses() {
  const ps = spawnSync("ps", ["-eo", "pid,pcpu,etime,args", "--sort=-pcpu", "--no-headers"], {
    encoding: "utf8",
  });
  for (const line of (ps.stdout ?? "").split("\n").slice(0, 8)) {
    const [pid, cpu] = line.trim().split(/\s+/).map(Number);
    if (pid !== process.pid && pid !== ps.pid && cpu >= BUSY_PERCENT && !line.endsWith("<defunct>"))
      console.log(`npm test: busy: ${line.trim().slice(0, 160)}`);
  }
}
reportLoad("before the runs");
reportBusyProcesses();

/** Starts one vitest run, its output tagged line by line; resolves with how it ended. */
function start(run) {
  const child = spawn(run.command, run.args, { cwd: root, env: run.env, stdio: ["ignore", "pipe", "pipe"] });
  children.add(child);
  // Before it starts its workers (they inherit it): node takes far longer to load vitest than this.
  if (run.priority !== undefined && child.pid !== undefined) setPriority(child.pid, run.priority);
  // Whole lines, tagged: the runs' reports interleave line by line, each still readable.
  for (const stream of [child.stdout, child.stderr]) {
    const out = stream === child.stdout ? process.stdout : process.stderr;
    createInterface({ input: stream, crlfDelay: Infinity }).on("line", (line) => {
      out.write(`${run.tag}│ ${line}\n`);
      const plain = line.replace(ANSI, "");
      if (FAILED_LINE.test(plain)) failures.push(`${run.tag}│ ${plain.trim()}`);
    });
  }
  return new Promise((resolve) => {
    child.on("error", (err) => resolve({ run, code: 1, why: err.message }));
    child.on("close", (code, signal) => {
      children.delete(child);
      resolve({ run, code: code ?? 1, why: signal !== null ? `killed by ${signal}` : `exit ${code}` });
    });
  });
}

// A terminal's Ctrl-C reaches the runs already (one process group); anything else is passed on.
let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"])
  process.on(signal, () => {
    stopping = true;
    if (signal === "SIGINT" && process.stdin.isTTY) return;
    for (const child of children) child.kill(signal);
  });

const results = await Promise.all(runs.map(start));
if (!stopping) results.push(await start(after));
const seconds = ((Date.now() - startedAt) / 1000).toFixed(1);
reportLoad("after them");
for (const line of failures) console.log(`npm test: failed: ${line}`);
for (const { run, code, why } of results)
  console.log(`npm test: ${run.tag.trim()} ${code === 0 ? "passed" : `FAILED (${why})`}`);
console.log(`npm test: ${seconds} s`);
process.exit(!stopping && results.every((r) => r.code === 0) ? 0 : 1);
