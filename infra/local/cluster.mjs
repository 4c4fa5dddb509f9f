#!/usr/bin/env node
// A local livecount deployment from the installed binaries, one or two data centers on one machine.
// Per DC: nats-server, redis-server (AOF, infra/redis/redis.conf), two counter nodes and two
// gateways, each a real process. With two DCs each nats-server runs infra/nats/dc<N>.conf (its own
// cluster, joined to the other DC by a NATS gateway) and the gateway links go through a TCP proxy
// (infra/local/link_proxy.mjs) so the link between the DCs can be cut and healed by hand. State,
// logs and pids live in infra/local/.run/. Usage:
//
//   node infra/local/cluster.mjs up [--dcs 2]   build, start everything, wait until ready and linked
//   node infra/local/cluster.mjs status         processes, /readyz, NATS gateway links, the link
//   node infra/local/cluster.mjs cut [--into dcN]    cut the link between the DCs (one direction with --into)
//   node infra/local/cluster.mjs heal [--into dcN]   heal it
//   node infra/local/cluster.mjs down           SIGTERM everything (counter nodes hand over), clean up
//
// Ports of DC N (N = 1, 2; see infra/README.md): NATS clients N4222, routes N6222, gateway N7222,
// its link proxy N7322, monitoring N8222; Redis N6379; gateways 8080/8082 (dc1), 8090/8092 (dc2);
// counter nodes' health and metrics 9101/9102 (dc1), 9201/9202 (dc2); link control 17900.
// With one DC, NATS_PORT, REDIS_PORT, GATEWAY1_PORT, GATEWAY2_PORT, COUNTER1_PORT and COUNTER2_PORT
// override dc1's ports. Every LIVECOUNT_* variable in the environment reaches every process, e.g.
// LIVECOUNT_DC_LEASE_MS=3000 to see a cut DC drop out of the totals sooner; DC2_LIVECOUNT_* (DC1_,
// after the DC's name) reaches only that DC's processes, as LIVECOUNT_*, to try DCs set up apart.
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

/** As in infra/k8s/counter.yaml: a larger young generation and old-space start for the counter node (infra/README.md). */
const COUNTER_NODE_FLAGS = ["--max-semi-space-size=32", "--initial-old-space-size=128"];

const root = fileURLToPath(new URL("../..", import.meta.url));
const runDir = fileURLToPath(new URL("./.run/", import.meta.url));
const pidFile = `${runDir}pids.json`;
const linkProxy = fileURLToPath(new URL("./link_proxy.mjs", import.meta.url));
const redisConf = fileURLToPath(new URL("../redis/redis.conf", import.meta.url));
const natsConf = (dc) => fileURLToPath(new URL(`../nats/${dc}.conf`, import.meta.url));
const env = process.env;
const LOOPBACK = "127.0.0.1";
const LINK_CONTROL_PORT = Number(env.LINK_CONTROL_PORT ?? 17900);
const MAX_DCS = 2;
const publisherKeys = env.LIVECOUNT_PUBLISHER_KEYS ?? "local-dev-key";
// For /metrics on every process and the console at /admin on the gateways (16 characters at least).
const adminKey = env.LIVECOUNT_ADMIN_KEY ?? "local-dev-admin-key";

/** DC2_LIVECOUNT_X=v in the environment as LIVECOUNT_X=v, for the processes of the DC named dc2. */
function envOfDc(name) {
  const prefix = `${name.toUpperCase()}_`;
  return Object.fromEntries(
    Object.entries(env)
      .filter(([key]) => key.startsWith(`${prefix}LIVECOUNT_`))
      .map(([key, value]) => [key.slice(prefix.length), value]),
  );
}

/** The ports of data center `n` (1-based). */
function portsOf(n) {
  const one = n === 1;
  const base = n * 10000;
  return {
    nats: Number((one && env.NATS_PORT) || base + 4222),
    routes: base + 6222,
    gateway: base + 7222,
    proxy: base + 7322,
    monitor: base + 8222,
    redis: Number((one && env.REDIS_PORT) || base + 6379),
    gateways: [
      Number((one && env.GATEWAY1_PORT) || 8080 + (n - 1) * 10),
      Number((one && env.GATEWAY2_PORT) || 8082 + (n - 1) * 10),
    ],
    counters: [
      Number((one && env.COUNTER1_PORT) || 9001 + n * 100),
      Number((one && env.COUNTER2_PORT) || 9002 + n * 100),
    ],
  };
}

function topology(count) {
  // One DC keeps honouring LIVECOUNT_DC; two are dc1 and dc2, the names in infra/nats.
  if (count === 1) return [{ name: env.LIVECOUNT_DC ?? "dc1", ports: portsOf(1) }];
  return Array.from({ length: count }, (_, i) => ({ name: `dc${i + 1}`, ports: portsOf(i + 1) }));
}

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

async function waitFor(what, check, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return;
    await sleep(200);
  }
  throw new Error(`${what}: not ready after ${timeoutMs} ms`);
}

const httpOk = (url) => globalThis.fetch(url).then((res) => res.ok);

/** Whether the DC's nats-server has gateway connections both ways with every other DC. */
async function linked(dc, dcs) {
  const z = await (await globalThis.fetch(`http://${LOOPBACK}:${dc.ports.monitor}/gatewayz`)).json();
  return dcs
    .filter((o) => o !== dc)
    .every(
      (o) => z.outbound_gateways?.[o.name] !== undefined && (z.inbound_gateways?.[o.name]?.length ?? 0) > 0,
    );
}

function startNats(dc, dcs) {
  const bin = binary("nats-server", "/usr/sbin/nats-server");
  const p = dc.ports;
  if (dcs.length === 1) return start(`${dc.name}-nats`, bin, ["-a", LOOPBACK, "-p", String(p.nats)]);
  const gatewayUrls = Object.fromEntries(
    dcs.map((o) => [`LC_NATS_${o.name.toUpperCase()}_GATEWAY`, `nats://${LOOPBACK}:${o.ports.proxy}`]),
  );
  return start(`${dc.name}-nats`, bin, ["-c", natsConf(dc.name)], {
    LC_NATS_SERVER_NAME: `${dc.name}-nats-1`,
    LC_NATS_LISTEN: `${LOOPBACK}:${p.nats}`,
    LC_NATS_MONITOR: `${LOOPBACK}:${p.monitor}`,
    LC_NATS_CLUSTER_LISTEN: `${LOOPBACK}:${p.routes}`,
    LC_NATS_ROUTES: `nats-route://${LOOPBACK}:${p.routes}`,
    LC_NATS_GATEWAY_LISTEN: `${LOOPBACK}:${p.gateway}`,
    // Other DCs dial this DC through the link proxy, and learn only that address from gossip.
    LC_NATS_GATEWAY_ADVERTISE: `${LOOPBACK}:${p.proxy}`,
    ...gatewayUrls,
  });
}

function startRedis(dc) {
  const dir = `${runDir}${dc.name}-redis`;
  mkdirSync(dir, { recursive: true });
  const bin = binary("redis-server", "/usr/bin/redis-server");
  // prettier-ignore
  return start(`${dc.name}-redis`, bin, [
    redisConf, "--port", String(dc.ports.redis), "--bind", LOOPBACK, "--dir", dir, "--logfile", "",
  ]);
}

function usage() {
  return "usage: node infra/local/cluster.mjs up [--dcs 1|2] | status | cut [--into dcN] | heal [--into dcN] | down";
}

async function up(args) {
  const count = Number(args.values.dcs ?? 1);
  if (!Number.isInteger(count) || count < 1 || count > MAX_DCS)
    throw new Error(`--dcs must be 1..${MAX_DCS}`);
  if (existsSync(pidFile))
    throw new Error("cluster already up (infra/local/.run/pids.json exists); run down first");
  mkdirSync(runDir, { recursive: true });
  console.log("building...");
  execFileSync("npm", ["run", "build", "--silent"], { cwd: root, stdio: "inherit" });
  const dcs = topology(count);
  const procs = [];
  const save = () => writeFileSync(pidFile, JSON.stringify({ dcs: count, procs }, null, 2));
  if (count > 1) {
    const routes = dcs.map((dc) => `${dc.name}=${dc.ports.proxy}:${dc.ports.gateway}`);
    procs.push(
      start("link", process.execPath, [linkProxy, "--control", String(LINK_CONTROL_PORT), ...routes]),
    );
    save();
  }
  for (const dc of dcs) {
    procs.push(startNats(dc, dcs), startRedis(dc));
    save();
  }
  for (const dc of dcs) {
    await waitFor(`${dc.name} nats-server`, async () => {
      const res = await globalThis
        .fetch(`http://${LOOPBACK}:${dc.ports.monitor}/healthz`)
        .catch(() => undefined);
      // One DC runs without a monitoring port: give it a moment instead.
      if (res === undefined && count === 1) return sleep(300).then(() => true);
      return res?.ok === true;
    });
    const common = {
      LIVECOUNT_DC: dc.name,
      // A DC started on an empty Redis learns its state from the others before it serves.
      ...(count > 1
        ? {
            LIVECOUNT_PEER_DCS: dcs
              .filter((d) => d !== dc)
              .map((d) => d.name)
              .join(","),
          }
        : {}),
      LIVECOUNT_NATS_URL: `nats://${LOOPBACK}:${dc.ports.nats}`,
      LIVECOUNT_REDIS_URL: `redis://${LOOPBACK}:${dc.ports.redis}`,
      LIVECOUNT_PUBLISHER_KEYS: publisherKeys,
      LIVECOUNT_ADMIN_KEY: adminKey,
      ...envOfDc(dc.name),
    };
    // Keep dc1's process names as they were with one DC.
    const prefix = count === 1 ? "" : `${dc.name}-`;
    dc.ports.counters.forEach((port, i) => {
      procs.push(
        start(
          `${prefix}counter${i + 1}`,
          process.execPath,
          [...COUNTER_NODE_FLAGS, "apps/counter/dist/main.js"],
          {
            ...common,
            LIVECOUNT_NODE_ID: `${dc.name}-counter${i + 1}`,
            LIVECOUNT_PORT: String(port),
          },
        ),
      );
    });
    dc.ports.gateways.forEach((port, i) => {
      procs.push(
        start(`${prefix}gateway${i + 1}`, process.execPath, ["apps/gateway/dist/main.js"], {
          ...common,
          LIVECOUNT_NODE_ID: `${dc.name}-gateway${i + 1}`,
          LIVECOUNT_PORT: String(port),
          // Two malloc arenas: less resident memory per idle socket (infra/README.md).
          MALLOC_ARENA_MAX: "2",
        }),
      );
    });
    save();
  }
  for (const dc of dcs) {
    for (const port of dc.ports.counters)
      await waitFor(`counter on ${port}`, () => httpOk(`http://${LOOPBACK}:${port}/readyz`));
    for (const port of dc.ports.gateways)
      await waitFor(`gateway on ${port}`, () => httpOk(`http://${LOOPBACK}:${port}/readyz`));
  }
  if (count > 1) {
    for (const dc of dcs) await waitFor(`${dc.name} NATS gateway links`, () => linked(dc, dcs));
  }
  console.log("\nready:");
  for (const dc of dcs) {
    console.log(
      `  ${dc.name}: gateways ${dc.ports.gateways.map((p) => `http://${LOOPBACK}:${p}/`).join(" and ")}`,
    );
  }
  console.log(`publisher key: ${publisherKeys}`);
  console.log(`admin key: ${adminKey} (console: http://${LOOPBACK}:${dcs[0].ports.gateways[0]}/admin)`);
  if (count > 1)
    console.log("cut the link between the DCs: node infra/local/cluster.mjs cut (heal: ... heal)");
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function readState() {
  if (!existsSync(pidFile)) return undefined;
  const state = JSON.parse(readFileSync(pidFile, "utf8"));
  // Files written before multi-DC support hold the process list alone.
  return Array.isArray(state) ? { dcs: 1, procs: state } : state;
}

async function down() {
  const state = readState();
  if (state === undefined) {
    console.log("cluster is not up");
    return;
  }
  // Gateways first, then counter nodes (they hand partitions over and flush), then the servers.
  const order = ["gateway", "counter", "redis", "nats", "link"];
  const kindOf = (name) => order.find((kind) => name.includes(kind));
  for (const kind of order) {
    const group = state.procs.filter((p) => kindOf(p.name) === kind);
    for (const p of group) if (alive(p.pid)) process.kill(p.pid, "SIGTERM");
    const deadline = Date.now() + 10_000;
    while (group.some((p) => alive(p.pid)) && Date.now() < deadline) await sleep(100);
    for (const p of group) {
      if (alive(p.pid)) {
        console.log(`${p.name} did not stop; killing`);
        process.kill(p.pid, "SIGKILL");
      }
      console.log(`stopped ${p.name}`);
    }
  }
  rmSync(runDir, { recursive: true, force: true });
}

async function control(path, into) {
  const state = readState();
  if (state === undefined || state.dcs < 2) throw new Error("no link: bring two DCs up first (up --dcs 2)");
  const query = into === undefined ? "" : `?into=${encodeURIComponent(into)}`;
  const res = await globalThis.fetch(`http://${LOOPBACK}:${LINK_CONTROL_PORT}${path}${query}`, {
    method: path === "/status" ? "GET" : "POST",
  });
  const body = await res.json();
  if (!res.ok) throw new Error(body.error ?? `link proxy answered ${res.status}`);
  return body;
}

async function cut(args) {
  console.log(JSON.stringify(await control("/cut", args.values.into)));
  console.log(
    "link cut: each DC keeps counting its own viewers and likes; after LIVECOUNT_DC_LEASE_MS " +
      "(default 15 s) the other DC's viewers leave its totals",
  );
}

async function heal(args) {
  console.log(JSON.stringify(await control("/heal", args.values.into)));
  console.log("link healed: NATS re-dials within about a second, then both DCs converge");
}

async function status() {
  const state = readState();
  if (state === undefined) {
    console.log("cluster is not up");
    return;
  }
  for (const p of state.procs)
    console.log(`${p.name.padEnd(16)} pid ${p.pid} ${alive(p.pid) ? "running" : "DEAD"}`);
  const dcs = topology(state.dcs);
  for (const dc of dcs) {
    for (const [kind, list] of [
      ["gateway", dc.ports.gateways],
      ["counter", dc.ports.counters],
    ]) {
      for (const port of list) {
        const ready = await httpOk(`http://${LOOPBACK}:${port}/readyz`).catch(() => false);
        console.log(`${dc.name} ${kind} :${port} ${ready ? "ready" : "not ready"}`);
      }
    }
    if (dcs.length > 1) {
      const up = await linked(dc, dcs).catch(() => false);
      console.log(`${dc.name} NATS gateway links ${up ? "up" : "DOWN"}`);
    }
  }
  if (dcs.length > 1)
    console.log(`link: ${JSON.stringify(await control("/status").catch((e) => String(e)))}`);
}

const args = parseArgs({
  args: process.argv.slice(3),
  options: { dcs: { type: "string" }, into: { type: "string" } },
  strict: true,
});
const command = process.argv[2];
const commands = { up, down, status, cut, heal };
if (!(command in commands)) {
  console.error(usage());
  process.exit(2);
}
try {
  await commands[command](args);
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
}
