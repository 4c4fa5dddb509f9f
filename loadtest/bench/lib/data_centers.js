/**
 * Two data centers for the multi-DC benchmarks. Per DC a nats-server running infra/nats/dc<N>.conf
 * (joined to the other DC by a NATS gateway through infra/local/link_proxy.mjs, which cuts and heals
 * the link), a redis-server, a counter node and a gateway, each its own process. A DC's counter
 * node and gateway can be started later than its servers (a DC that joins late).
 */
import { spawn } from "node:child_process";
import { mkdirSync, openSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Redis } from "ioredis";
import { scrape, metricSum } from "./measure.js";
import {
  LOOPBACK,
  ROOT,
  binary,
  freePort,
  spawnProduct,
  startRedis,
  trackChild,
  waitHttp,
} from "./processes.js";

export const DCS = ["dc1", "dc2"];
export const PUBLISHER_KEY = "bench-publisher-key";
const READY_MS = 120_000;
/** Partitions of the deployment (LIVECOUNT_PARTITIONS default): digests are read per partition. */
const PARTITIONS = 256;
/** ARGV: partitions. Every partition's digest (store key lc:digest:{p}, field all), comma-separated. */
const DIGESTS_SCRIPT = `
local out = {}
for p = 0, tonumber(ARGV[1]) - 1 do
  out[#out + 1] = redis.call("HGET", "lc:digest:" .. p, "all") or "0000000000000000"
end
return table.concat(out, ",")`;

/** Starts a DC's nats-server on its infra/nats config, gateways dialled through the link proxy. */
async function startNatsDc(dir, dc, ports, all) {
  const bin = binary("nats-server", "LIVECOUNT_NATS_SERVER", "/usr/sbin/nats-server");
  const logPath = join(dir, `${dc}-nats.log`);
  const log = openSync(logPath, "a");
  const env = {
    ...process.env,
    LC_NATS_SERVER_NAME: `bench-${dc}`,
    LC_NATS_LISTEN: `${LOOPBACK}:${ports.client}`,
    LC_NATS_MONITOR: `${LOOPBACK}:${ports.monitor}`,
    LC_NATS_CLUSTER_LISTEN: `${LOOPBACK}:${ports.routes}`,
    LC_NATS_ROUTES: `nats-route://${LOOPBACK}:${ports.routes}`,
    LC_NATS_GATEWAY_LISTEN: `${LOOPBACK}:${ports.gateway}`,
    LC_NATS_GATEWAY_ADVERTISE: `${LOOPBACK}:${ports.proxy}`,
    ...Object.fromEntries(
      Object.entries(all).map(([name, p]) => [
        `LC_NATS_${name.toUpperCase()}_GATEWAY`,
        `nats://${LOOPBACK}:${p.proxy}`,
      ]),
    ),
  };
  const child = spawn(bin, ["-c", join(ROOT, "infra", "nats", `${dc}.conf`)], {
    env,
    stdio: ["ignore", log, log],
  });
  const proc = trackChild(child, `${dc}-nats`);
  await waitHttp(`http://${LOOPBACK}:${ports.monitor}/healthz`, `${dc} nats-server (log ${logPath})`);
  return { ...proc, logPath, url: `nats://${LOOPBACK}:${ports.client}` };
}

export async function waitFor(what, check, timeoutMs, intervalMs = 20) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return;
    await sleep(intervalMs);
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}

/**
 * The two DCs. `procs` collects every process (the caller stops them); `env` is added to every
 * livecount process's environment.
 */
export class DataCenters {
  /** dc -> { nats, redis, redisClient, counterPort, gatewayUrl } */
  dcs = {};
  ports = {};
  control = "";

  constructor(dir, procs, env) {
    this.dir = dir;
    this.procs = procs;
    this.env = env;
  }

  /** Starts the link proxy and every DC's nats-server and redis-server (no livecount process yet). */
  async startServers() {
    for (const dc of DCS) {
      this.ports[dc] = {
        client: await freePort(),
        routes: await freePort(),
        gateway: await freePort(),
        proxy: await freePort(),
        monitor: await freePort(),
      };
    }
    const controlPort = await freePort();
    const linkLog = openSync(join(this.dir, "link.log"), "a");
    const linkArgs = DCS.map((dc) => `${dc}=${this.ports[dc].proxy}:${this.ports[dc].gateway}`);
    const link = trackChild(
      spawn(
        process.execPath,
        [join(ROOT, "infra/local/link_proxy.mjs"), "--control", String(controlPort), ...linkArgs],
        {
          stdio: ["ignore", linkLog, linkLog],
        },
      ),
      "link",
    );
    this.procs.push(link);
    this.control = `http://${LOOPBACK}:${controlPort}`;
    await waitHttp(`${this.control}/status`, "link proxy");
    for (const dc of DCS) {
      const nats = await startNatsDc(this.dir, dc, this.ports[dc], this.ports);
      const redisDir = join(this.dir, dc);
      mkdirSync(redisDir);
      const redis = { ...(await startRedis(redisDir)), name: `${dc}-redis` };
      this.procs.push(nats, redis);
      const redisClient = new Redis(redis.url, { lazyConnect: true });
      await redisClient.connect();
      this.dcs[dc] = { nats, redis, redisClient };
    }
    await waitFor("NATS gateway links", () => this.linked(), READY_MS);
  }

  /** Starts a DC's counter node, waits until it is ready, then its gateway. Resolves with the ms to ready. */
  async startDc(dc, extraEnv = {}) {
    const d = this.dcs[dc];
    const common = {
      LIVECOUNT_DC: dc,
      LIVECOUNT_NATS_URL: d.nats.url,
      LIVECOUNT_REDIS_URL: d.redis.url,
      LIVECOUNT_PUBLISHER_KEYS: PUBLISHER_KEY,
      // LC_BENCH_LOG_LEVEL=info shows anti-entropy and bootstrap progress (logs kept with LC_BENCH_KEEP=1).
      LIVECOUNT_LOG_LEVEL: process.env.LC_BENCH_LOG_LEVEL ?? "warn",
      ...this.env,
      ...extraEnv,
    };
    d.counterPort = await freePort();
    const started = Date.now();
    const counter = spawnProduct(
      `${dc}-counter`,
      "apps/counter/dist/main.js",
      { ...common, LIVECOUNT_NODE_ID: `${dc}-counter`, LIVECOUNT_PORT: String(d.counterPort) },
      this.dir,
    );
    this.procs.push(counter);
    await waitHttp(`http://${LOOPBACK}:${d.counterPort}/readyz`, `${dc} counter node`, counter, READY_MS);
    const readyMs = Date.now() - started;
    const gatewayPort = await freePort();
    const gateway = spawnProduct(
      `${dc}-gateway`,
      "apps/gateway/dist/main.js",
      { ...common, LIVECOUNT_NODE_ID: `${dc}-gateway`, LIVECOUNT_PORT: String(gatewayPort) },
      this.dir,
    );
    this.procs.push(gateway);
    d.gatewayUrl = `http://${LOOPBACK}:${gatewayPort}`;
    await waitHttp(`${d.gatewayUrl}/readyz`, `${dc} gateway`, gateway, READY_MS);
    return readyMs;
  }

  /** Whether both nats-servers have gateway connections both ways. */
  async linked() {
    for (const [dc, p] of Object.entries(this.ports)) {
      const other = DCS.find((d) => d !== dc);
      const res = await globalThis.fetch(`http://${LOOPBACK}:${p.monitor}/gatewayz`);
      const z = await res.json();
      if (z.outbound_gateways?.[other] === undefined || !(z.inbound_gateways?.[other]?.length > 0))
        return false;
    }
    return true;
  }

  async cut() {
    await globalThis.fetch(`${this.control}/cut`, { method: "POST" });
  }

  async heal() {
    await globalThis.fetch(`${this.control}/heal`, { method: "POST" });
  }

  /**
   * Every partition's digest in a DC's Redis (equal in two DCs exactly when they hold the same
   * entries), in one script call: polled every few ms while a benchmark runs, 256 commands per poll
   * would load the machine it measures.
   */
  async digests(dc) {
    const all = await this.dcs[dc].redisClient.eval(DIGESTS_SCRIPT, 0, PARTITIONS);
    return all.split(",");
  }

  /** Whether every partition's digest is the same in both DCs. */
  async sameState() {
    const [a, b] = await Promise.all(DCS.map((dc) => this.digests(dc)));
    return a.every((d, i) => d === b[i]);
  }

  /** A counter node metric, summed over its label values. */
  async counterMetric(dc, name) {
    return metricSum(await scrape(`http://${LOOPBACK}:${this.dcs[dc].counterPort}/metrics`), name);
  }

  /** One like on every page through a DC's gateway, in batches, each with a fresh idempotency key. */
  async likeAll(dc, pages, batch, tag) {
    for (let i = 0; i < pages.length; i += batch) {
      const items = pages
        .slice(i, i + batch)
        .map((page) => ({ page, counter: "likes", change: 1, id: `${tag}-${page}` }));
      for (let attempt = 1; ; attempt++) {
        const res = await globalThis.fetch(`${this.dcs[dc].gatewayUrl}/v1/counters/increment`, {
          method: "POST",
          headers: { authorization: `Bearer ${PUBLISHER_KEY}`, "content-type": "application/json" },
          body: JSON.stringify(items),
        });
        const body = await res.json();
        // Retried with the same ids: a repeat never counts twice.
        const failed = res.ok ? body.results.filter((r) => r.error !== undefined) : items;
        if (failed.length === 0) break;
        if (attempt >= 10) throw new Error(`likes failed: ${JSON.stringify(failed[0])}`);
        await sleep(200);
      }
    }
  }

  /** Likes of `pages` as a DC's gateway reads them, 100 pages per request. */
  async likesOf(dc, pages) {
    const out = new Map();
    for (let i = 0; i < pages.length; i += 100) {
      const query = pages
        .slice(i, i + 100)
        .map((p) => `page=${encodeURIComponent(p)}`)
        .join("&");
      const body = await this.#read(dc, `/v1/counters?${query}`);
      for (const page of body.pages) out.set(page.page, page.counters.likes ?? 0);
    }
    return out;
  }

  /**
   * A read from a DC's gateway, retried while it answers 503 (an owner busy with a heal's merge did
   * not answer within the request timeout) or 429 (the read budget): those say "later", not "wrong".
   */
  async #read(dc, path) {
    for (let attempt = 1; ; attempt++) {
      const res = await globalThis.fetch(`${this.dcs[dc].gatewayUrl}${path}`);
      if (res.ok) return res.json();
      const text = await res.text();
      if ((res.status !== 503 && res.status !== 429) || attempt >= 20)
        throw new Error(`GET ${path.slice(0, 60)}... on ${dc} answered ${res.status}: ${text.slice(0, 200)}`);
      await sleep(250);
    }
  }

  async close() {
    for (const d of Object.values(this.dcs)) d.redisClient.disconnect();
  }
}
