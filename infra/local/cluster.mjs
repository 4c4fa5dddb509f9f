#!/usr/bin/env node
// A local one-data-center cluster from the installed binaries: nats-server, redis-server (AOF),
// two counter nodes and two gateways, each a real process. State, logs and pids live in
// infra/local/.run/. Usage:
//
//   node infra/local/cluster.mjs up       build, start everything, wait until ready
//   node infra/local/cluster.mjs status   what runs, and each process's /readyz
//   node infra/local/cluster.mjs down     SIGTERM everything (counter nodes hand over), then clean up
//
// Ports (override with the same names in the environment): NATS 14222, Redis 16379,
// gateways 8080 and 8082, counter nodes' health/metrics 9101 and 9102.
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const runDir = fileURLToPath(new URL("./.run/", import.meta.url));
const pidFile = `${runDir}pids.json`;
const env = process.env;
const ports = {
  nats: Number(env.NATS_PORT ?? 14222),
  redis: Number(env.REDIS_PORT ?? 16379),
  gateways: [Number(env.GATEWAY1_PORT ?? 8080), Number(env.GATEWAY2_PORT ?? 8082)],
  counters: [Number(env.COUNTER1_PORT ?? 9101), Number(env.COUNTER2_PORT ?? 9102)],
};
const dc = env.LIVECOUNT_DC ?? "dc1";
const publisherKeys = env.LIVECOUNT_PUBLISHER_KEYS ?? "local-dev-key";

function binary(name, fallback) {
  try {
    return execFileSync("sh", ["-c", `command -v ${name}`])
      .toString()
      .trim();
  } catch {
    if (existsSync(fallback)) return fallback;
    throw new Error(`${name} not found: install it (apt-get install ${name})`);
  }
}

function start(name, command, args, extraEnv = {}) {
  const log = openSync(`${runDir}${name}.log`, "a");
  const child = spawn(command, args, {
    cwd: root,
    env: { ...env, ...extraEnv },
    stdio: ["ignore", log, log],
    detached: true,
  });
  child.unref();
  console.log(`started ${name} (pid ${child.pid}), log ${runDir}${name}.log`);
  return { name, pid: child.pid };
}

async function waitFor(url, what, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url);
      if (res.ok) return;
    } catch {
      // not up yet
    }
    await sleep(200);
  }
  throw new Error(`${what} not ready after ${timeoutMs} ms (${url})`);
}

async function up() {
  if (existsSync(pidFile))
    throw new Error("cluster already up (infra/local/.run/pids.json exists); run down first");
  mkdirSync(`${runDir}redis`, { recursive: true });
  console.log("building...");
  execFileSync("npm", ["run", "build", "--silent"], { cwd: root, stdio: "inherit" });
  const procs = [];
  const save = () => writeFileSync(pidFile, JSON.stringify(procs, null, 2));
  procs.push(
    start("nats", binary("nats-server", "/usr/sbin/nats-server"), [
      "-a",
      "127.0.0.1",
      "-p",
      String(ports.nats),
    ]),
  );
  save();
  procs.push(
    start("redis", binary("redis-server", "/usr/bin/redis-server"), [
      "--port",
      String(ports.redis),
      "--bind",
      "127.0.0.1",
      "--dir",
      `${runDir}redis`,
      "--appendonly",
      "yes",
      "--appendfsync",
      "everysec",
      "--save",
      "",
    ]),
  );
  save();
  await sleep(300);
  const common = {
    LIVECOUNT_DC: dc,
    LIVECOUNT_NATS_URL: `nats://127.0.0.1:${ports.nats}`,
    LIVECOUNT_REDIS_URL: `redis://127.0.0.1:${ports.redis}`,
    LIVECOUNT_PUBLISHER_KEYS: publisherKeys,
  };
  ports.counters.forEach((port, i) => {
    procs.push(
      start(`counter${i + 1}`, process.execPath, ["apps/counter/dist/main.js"], {
        ...common,
        LIVECOUNT_NODE_ID: `counter${i + 1}`,
        LIVECOUNT_PORT: String(port),
      }),
    );
  });
  ports.gateways.forEach((port, i) => {
    procs.push(
      start(`gateway${i + 1}`, process.execPath, ["apps/gateway/dist/main.js"], {
        ...common,
        LIVECOUNT_NODE_ID: `gateway${i + 1}`,
        LIVECOUNT_PORT: String(port),
      }),
    );
  });
  save();
  for (const port of ports.counters) await waitFor(`http://127.0.0.1:${port}/readyz`, `counter on ${port}`);
  for (const port of ports.gateways) await waitFor(`http://127.0.0.1:${port}/readyz`, `gateway on ${port}`);
  console.log(`\nready: gateways at ${ports.gateways.map((p) => `http://127.0.0.1:${p}/`).join(" and ")}`);
  console.log(`publisher key: ${publisherKeys}`);
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function down() {
  if (!existsSync(pidFile)) {
    console.log("cluster is not up");
    return;
  }
  const procs = JSON.parse(readFileSync(pidFile, "utf8"));
  // Gateways first, then counter nodes (they hand partitions over and flush), then the servers.
  const order = ["gateway", "counter", "redis", "nats"];
  for (const kind of order) {
    const group = procs.filter((p) => p.name.startsWith(kind));
    for (const p of group) if (alive(p.pid)) process.kill(p.pid, "SIGTERM");
    const deadline = Date.now() + 10_000;
    while (group.some((p) => alive(p.pid)) && Date.now() < deadline) await sleep(100);
    for (const p of group) {
      if (alive(p.pid)) {
        console.log(`${p.name} did not stop; killing`);
        process.kill(p.pid, "SIGKILL");
      }
    }
    for (const p of group) console.log(`stopped ${p.name}`);
  }
  rmSync(runDir, { recursive: true, force: true });
}

async function status() {
  if (!existsSync(pidFile)) {
    console.log("cluster is not up");
    return;
  }
  for (const p of JSON.parse(readFileSync(pidFile, "utf8")))
    console.log(`${p.name.padEnd(9)} pid ${p.pid} ${alive(p.pid) ? "running" : "DEAD"}`);
  for (const [kind, list] of [
    ["gateway", ports.gateways],
    ["counter", ports.counters],
  ]) {
    for (const port of list) {
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      console.log(`${kind} :${port} ${ready ? "ready" : "not ready"}`);
    }
  }
}

const command = process.argv[2];
const commands = { up, down, status };
if (!(command in commands)) {
  console.error("usage: node infra/local/cluster.mjs up|status|down");
  process.exit(2);
}
try {
  await commands[command]();
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
}
