/**
 * Processes for the benchmarks: our own nats-server and redis-server on free ports with their own
 * temp dirs (never the ones already running on 4222/6379), product processes from the build, and a
 * registry that kills every child when the bench ends, fails or gets SIGINT/SIGTERM.
 *
 * Modelled on test/support/nats_server.ts and redis_server.ts, without the test-runner parts.
 */
import { execFileSync, fork, spawn } from "node:child_process";
import {
  accessSync,
  constants as fsConstants,
  mkdirSync,
  mkdtempSync,
  openSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

export const LOOPBACK = "127.0.0.1";
/** The repository root (loadtest/bench/lib/ -> ../../..). */
export const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const READY_TIMEOUT_MS = 15_000;
/**
 * How long a stopped child may take to exit before SIGKILL. A profiled one (--cpu-prof, --heap-prof)
 * writes its profile only on a clean exit, after its drain: it gets a minute.
 */
const STOP_GRACE_MS = /--(cpu|heap)-prof/.test(process.env.LC_BENCH_NODE_FLAGS ?? "") ? 60_000 : 4_000;

/** Every child still running, with how to stop it. */
const running = new Map();
/** Temp dirs to delete at exit. */
const tempDirs = new Set();

/** A temp dir for logs and server state, deleted when the bench exits (unless LC_BENCH_KEEP=1). */
export function benchDir(name) {
  const dir = mkdtempSync(join(tmpdir(), `livecount-bench-${name}-`));
  tempDirs.add(dir);
  return dir;
}

function killAll(signal) {
  for (const child of running.keys()) {
    try {
      child.kill(signal);
    } catch {
      // already gone
    }
  }
}

let cleanupInstalled = false;
/** Kills every child on exit and on SIGINT/SIGTERM (then exits with 130/143). */
export function installCleanup() {
  if (cleanupInstalled) return;
  cleanupInstalled = true;
  process.once("exit", () => {
    killAll("SIGKILL");
    if (process.env.LC_BENCH_KEEP !== "1") {
      for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
    }
  });
  for (const [signal, code] of [
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ]) {
    process.once(signal, () => {
      console.error(`\n${signal}: stopping every benchmark process`);
      killAll("SIGKILL");
      process.exit(code);
    });
  }
}

function isExecutable(path) {
  try {
    accessSync(path, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** An installed binary: $envVar, else PATH, else the Debian location. */
export function binary(name, envVar, fallback) {
  const fromEnv = process.env[envVar];
  if (fromEnv) return fromEnv;
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir !== "" && isExecutable(join(dir, name))) return join(dir, name);
  }
  if (isExecutable(fallback)) return fallback;
  throw new Error(`${name} not found: install it (apt-get install ${name}) or set ${envVar}`);
}

/** Ports handed out by freePort in this process: the kernel may pick a released port again. */
const givenPorts = new Set();

/**
 * A port nobody listens on right now (bind 0, release) and not handed out before in this process,
 * so two servers started one after the other never get the same port.
 */
export async function freePort(host = LOOPBACK) {
  for (;;) {
    const port = await new Promise((resolve, reject) => {
      const server = createServer();
      server.once("error", reject);
      server.listen(0, host, () => {
        const { port } = server.address();
        server.close(() => resolve(port));
      });
    });
    if (givenPorts.has(port)) continue;
    givenPorts.add(port);
    return port;
  }
}

/** Resolves with the first bytes a TCP server sends after `hello` (nothing sent when undefined). */
async function greeting(port, hello) {
  return new Promise((resolve) => {
    const socket = createConnection({ host: LOOPBACK, port });
    let text = "";
    const done = (value) => {
      socket.destroy();
      resolve(value);
    };
    socket.setEncoding("utf8");
    socket.setTimeout(1000, () => done(""));
    socket.once("error", () => done(""));
    socket.once("connect", () => hello !== undefined && socket.write(hello));
    socket.on("data", (chunk) => {
      text += chunk;
      if (text.includes("\r\n")) done(text);
    });
  });
}

/** A tracked child; `stop()` sends SIGTERM, then SIGKILL after a grace period. */
function track(child, name, logPath) {
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const entry = { name, logPath };
  running.set(child, entry);
  exited.then(() => running.delete(child));
  return {
    name,
    child,
    pid: child.pid,
    logPath,
    exited,
    get alive() {
      return child.exitCode === null && child.signalCode === null;
    },
    async stop(signal = "SIGTERM") {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill(signal);
      const timer = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS);
      await exited;
      clearTimeout(timer);
    },
  };
}

async function waitUntil(check, what, timeoutMs = READY_TIMEOUT_MS, proc = undefined) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc !== undefined && !proc.alive) throw new Error(`${what}: process exited; log: ${proc.logPath}`);
    if (await check()) return;
    await sleep(50);
  }
  throw new Error(`${what} not ready after ${timeoutMs} ms${proc ? `; log: ${proc.logPath}` : ""}`);
}

/** Starts nats-server on a free port with a generated config in its own temp dir. */
export async function startNats(dir) {
  const bin = binary("nats-server", "LIVECOUNT_NATS_SERVER", "/usr/sbin/nats-server");
  const port = await freePort();
  const conf = join(dir, "nats.conf");
  writeFileSync(conf, `server_name: "lc-bench-${port}"\nlisten: "${LOOPBACK}:${port}"\n`);
  const logPath = join(dir, "nats.log");
  const log = openSync(logPath, "a");
  const proc = track(spawn(bin, ["-c", conf], { stdio: ["ignore", log, log] }), "nats-server", logPath);
  await waitUntil(async () => (await greeting(port)).startsWith("INFO "), "nats-server", undefined, proc);
  return { ...proc, port, url: `nats://${LOOPBACK}:${port}` };
}

/** Starts redis-server on a free port, no persistence (the benchmarks measure CPU, not disks). */
export async function startRedis(dir, { name = "redis", extraArgs = [] } = {}) {
  const bin = binary("redis-server", "LIVECOUNT_REDIS_SERVER", "/usr/bin/redis-server");
  const port = await freePort();
  const logPath = join(dir, `${name}.log`);
  const log = openSync(logPath, "a");
  // prettier-ignore
  const args = [
    "--port", String(port), "--bind", LOOPBACK, "--dir", dir,
    "--save", "", "--appendonly", "no", "--logfile", "",
    ...extraArgs,
  ];
  const proc = track(spawn(bin, args, { stdio: ["ignore", log, log] }), name, logPath);
  await waitUntil(async () => (await greeting(port, "PING\r\n")).startsWith("+PONG"), name, undefined, proc);
  return { ...proc, port, url: `redis://${LOOPBACK}:${port}` };
}

/**
 * Starts a Redis Cluster of `masters` masters with `replicas` replicas each (no persistence), created
 * with `redis-cli --cluster create`; resolves once every node reports every slot served. `seeds` is
 * what LIVECOUNT_REDIS_CLUSTER takes; `nodes` every server, `masters` those that serve slots.
 */
export async function startRedisCluster(dir, { masters = 3, replicas = 1 } = {}) {
  const cli = binary("redis-cli", "LIVECOUNT_REDIS_CLI", "/usr/bin/redis-cli");
  const nodes = [];
  for (let i = 0; i < masters * (1 + replicas); i++) {
    const nodeDir = join(dir, `redis-cluster-${i}`);
    mkdirSync(nodeDir, { recursive: true });
    const busPort = await freePort();
    // prettier-ignore
    nodes.push(await startRedis(nodeDir, {
      name: `redis-cluster-${i}`,
      extraArgs: [
        "--cluster-enabled", "yes", "--cluster-config-file", join(nodeDir, "nodes.conf"),
        "--cluster-port", String(busPort), "--cluster-node-timeout", "5000",
      ],
    }));
  }
  const addresses = nodes.map((n) => `${LOOPBACK}:${n.port}`);
  execFileSync(
    cli,
    ["--cluster", "create", ...addresses, "--cluster-replicas", String(replicas), "--cluster-yes"],
    {
      stdio: "ignore",
    },
  );
  await waitUntil(
    async () => {
      for (const n of nodes) {
        const info = execFileSync(cli, ["-h", LOOPBACK, "-p", String(n.port), "cluster", "info"], {
          encoding: "utf8",
        });
        if (!info.includes("cluster_state:ok") || !info.includes("cluster_slots_ok:16384")) return false;
      }
      return true;
    },
    "redis cluster",
    30_000,
  );
  const role = (n) =>
    execFileSync(cli, ["-h", LOOPBACK, "-p", String(n.port), "role"], { encoding: "utf8" }).split("\n")[0];
  return {
    nodes,
    masters: nodes.filter((n) => role(n) === "master"),
    seeds: addresses.join(","),
    async stop() {
      for (const n of nodes) await n.stop();
    },
  };
}

/**
 * Node flags a counter node runs with in every deployment (infra/k8s, infra/compose,
 * infra/local/cluster.mjs, apps/counter's start script); infra/README.md says why.
 */
const COUNTER_NODE_FLAGS = ["--max-semi-space-size=32", "--initial-old-space-size=128"];

/**
 * Environment a gateway runs with in every deployment (infra/k8s, infra/compose, infra/local/cluster.mjs,
 * apps/gateway's start script); infra/README.md says why.
 */
const GATEWAY_ENV = { MALLOC_ARENA_MAX: "2" };

/** Extra node flags for product processes, e.g. LC_BENCH_NODE_FLAGS="--cpu-prof --cpu-prof-dir=/tmp/p". */
function productFlags() {
  return (process.env.LC_BENCH_NODE_FLAGS ?? "").split(" ").filter((f) => f !== "");
}

/** The admin key of every benchmarked process: scrape() sends it for /metrics. */
export const BENCH_ADMIN_KEY = "bench-admin-key-0000001";

/**
 * Settings every benchmarked process gets. The load driver opens thousands of sockets from each
 * loopback address, far past the per-address default (500) that protects a public gateway.
 */
const BENCH_EDGE_ENV = {
  // LC_BENCH_LOG_LEVEL=info shows start-up and progress (logs kept with LC_BENCH_KEEP=1).
  LIVECOUNT_LOG_LEVEL: process.env.LC_BENCH_LOG_LEVEL ?? "warn",
  LIVECOUNT_ADMIN_KEY: BENCH_ADMIN_KEY,
  LIVECOUNT_MAX_CONNECTIONS_PER_IP: "20000",
  // The load drivers invent many pages from a handful of loopback addresses.
  LIVECOUNT_MAX_PAGES_PER_IP: "1000000",
  LIVECOUNT_NEW_PAGE_RATE: "1000000",
  LIVECOUNT_NEW_PAGE_BURST: "1000000",
  LIVECOUNT_READ_RATE: "100000",
  LIVECOUNT_READ_BURST: "100000",
  LIVECOUNT_HTTP_RATE: "100000",
  LIVECOUNT_HTTP_BURST: "100000",
};

/**
 * Spawns a product entry point (e.g. apps/counter/dist/main.js) with `env` on top of a clean
 * environment (no LIVECOUNT_* leaking from the caller's shell). Output goes to `<dir>/<name>.log`.
 * `nodeFlags` go before the script (e.g. --inspect to force a GC from outside).
 */
export function spawnProduct(name, entry, env, dir, nodeFlags = []) {
  const logPath = join(dir, `${name}.log`);
  const log = openSync(logPath, "a");
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LIVECOUNT_")));
  const deployed = entry === "apps/counter/dist/main.js" ? COUNTER_NODE_FLAGS : [];
  const child = spawn(process.execPath, [...deployed, ...productFlags(), ...nodeFlags, join(ROOT, entry)], {
    cwd: ROOT,
    env: {
      ...(entry === "apps/gateway/dist/main.js" ? GATEWAY_ENV : {}),
      ...base,
      ...BENCH_EDGE_ENV,
      ...env,
    },
    stdio: ["ignore", log, log],
  });
  return track(child, name, logPath);
}

/**
 * Starts a counter node (`env` on top of its node id and port) and waits until it owns every
 * partition (/readyz). The caller stops it.
 */
export async function startCounterNode(dir, nodeId, env) {
  const port = await freePort();
  const counter = spawnProduct(
    "counter",
    "apps/counter/dist/main.js",
    { ...env, LIVECOUNT_NODE_ID: nodeId, LIVECOUNT_PORT: String(port) },
    dir,
  );
  await waitHttp(`http://127.0.0.1:${port}/readyz`, "counter node", counter);
  return counter;
}

/** Forks a bench helper script (IPC channel open); its output goes to `<dir>/<name>.log`. */
export function forkHelper(name, script, args, dir, extraEnv = {}) {
  const logPath = join(dir, `${name}.log`);
  const log = openSync(logPath, "a");
  const child = fork(script, args, {
    cwd: ROOT,
    env: { ...process.env, ...extraEnv },
    stdio: ["ignore", log, log, "ipc"],
    serialization: "advanced",
  });
  return track(child, name, logPath);
}

/** Registers a child forked elsewhere (e.g. by the load driver) for cleanup. */
export function trackChild(child, name) {
  return track(child, name, undefined);
}

/** Whether GET `url` answers 2xx now (false when it cannot be reached). */
export async function fetchOk(url) {
  try {
    const res = await globalThis.fetch(url);
    await res.arrayBuffer();
    return res.ok;
  } catch {
    return false;
  }
}

/** Waits until GET `url` answers 2xx. */
export async function waitHttp(url, what, proc, timeoutMs = READY_TIMEOUT_MS) {
  await waitUntil(() => fetchOk(url), what, timeoutMs, proc);
}

/** Node's version and the machine, for the report. */
export function machine() {
  let cpu = "unknown";
  try {
    cpu = execFileSync("sh", ["-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"]).toString().trim();
  } catch {
    // not Linux
  }
  // The product may carry uncommitted changes: say which commit and whether the tree was dirty.
  let revision = "unknown";
  try {
    const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT }).toString().trim();
    const dirty = execFileSync("git", ["status", "--porcelain", "--untracked-files=no"], { cwd: ROOT })
      .toString()
      .trim();
    revision = dirty === "" ? commit : `${commit}+uncommitted`;
  } catch {
    // not a git checkout
  }
  return { node: process.version, cpu, revision };
}

/** Sends `msg` to a forked helper and resolves with its first reply of `type`. */
export function ask(proc, msg, type, timeoutMs = 120_000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`${proc.name}: no ${type} reply in ${timeoutMs} ms (log: ${proc.logPath})`));
    }, timeoutMs);
    const onMessage = (reply) => {
      if (reply?.type === "error") {
        cleanup();
        reject(new Error(`${proc.name}: ${reply.message}`));
      } else if (reply?.type === type) {
        cleanup();
        resolve(reply);
      }
    };
    const onExit = () => {
      cleanup();
      reject(new Error(`${proc.name} exited before replying ${type} (log: ${proc.logPath})`));
    };
    const cleanup = () => {
      clearTimeout(timer);
      proc.child.off("message", onMessage);
      proc.child.off("exit", onExit);
    };
    proc.child.on("message", onMessage);
    proc.child.once("exit", onExit);
    if (msg !== undefined) proc.child.send(msg);
  });
}
