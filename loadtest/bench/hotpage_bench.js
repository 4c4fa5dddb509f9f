/**
 * Benchmark (g): exactly-once increments on ONE hot page over HTTP, against the plain way in the
 * same run.
 *
 * livecount: nats-server, redis-server, one counter node and one gateway, each its own process;
 * every request goes client -> gateway -> (NATS) -> the page's owner -> Redis and back.
 * baseline: loadtest/bench/hotpage_baseline.js, one uWS process doing one EVALSHA (SET NX EX +
 * HINCRBY) per request on its own redis-server.
 * Both get the same load: `connections` keep-alive connections (wrk when installed, see
 * lib/http_load.js), every request `PUT /v1/pages/hot-page/counter` +1 with its own
 * Idempotency-Key, a warm-up, then a measured window.
 *
 * Exactness, checked afterwards on both sides: the counter moved by at least the 2xx answers and
 * at most the requests sent (the ones in flight when the load stopped may or may not have landed).
 * livecount: every key of the window is sent again (`POST /v1/counters/increment`, batches of
 * 1000); the keys that had landed must come back as duplicates, the rest count now, and the counter
 * must then have moved by exactly the keys sent. baseline: its Redis holds one idempotency key per
 * counted increment (the counter equals their number), and a sample of keys sent again counts
 * nothing.
 *
 * Optionally (standalone=1) the embedded process (`npm start`: gateway + counter in one process, in
 * memory) under the same load: informational.
 */
import { randomBytes } from "node:crypto";
import { loadavg } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import { keysSent, runLoad, wrkBinary } from "./lib/http_load.js";
import { callDeltas, cpuTimes, metricSum, redisStats, round, scrape } from "./lib/measure.js";
import {
  ask,
  benchDir,
  forkHelper,
  freePort,
  spawnProduct,
  startCounterNode,
  startNats,
  startRedis,
  waitHttp,
} from "./lib/processes.js";

const BASELINE = fileURLToPath(new URL("./hotpage_baseline.js", import.meta.url));
const PUBLISHER_KEY = "bench-publisher-key";
const PAGE = "hot-page";
const COUNTER = "likes";
const PATH = `/v1/pages/${PAGE}/counter`;
const BODY = JSON.stringify({ action: "increment", counter: COUNTER, by: 1 });
const REPLAY_BATCH = 1000;
/** Keys the baseline is sent again: replays must count nothing. */
const BASELINE_REPLAY_SAMPLE = 500;
/** Answers still in flight when the load stops land within this. */
const SETTLE_MS = 1000;

/** The hot page must not trip the edge's limits: a publisher key making 100k requests/s is the point. */
const UNLIMITED_PUBLISHER = { LIVECOUNT_PUBLISHER_RATE: "10000000", LIVECOUNT_PUBLISHER_BURST: "10000000" };

export const defaults = {
  connections: 64,
  /** wrk threads (the machine's cores are shared with the servers). */
  threads: 2,
  warmupS: 3,
  measureS: 10,
  /** 1: also measure the embedded process (informational). */
  standalone: 1,
  /** 1: use the Node driver even when wrk is installed. */
  nodeDriver: 0,
};

/** Warm-up, then the measured window; reads the counter around it with `read`. */
async function measure(name, t, o, log) {
  const load = (prefix, durationS) =>
    runLoad({
      baseUrl: t.baseUrl,
      path: PATH,
      key: PUBLISHER_KEY,
      body: BODY,
      prefix,
      connections: o.connections,
      threads: o.threads,
      durationS,
      dir: t.dir,
      driver: o.nodeDriver === 1 ? "node" : undefined,
    });
  const run = randomBytes(4).toString("hex");
  await load(`warm-${run}`, o.warmupS);
  await sleep(SETTLE_MS);
  const before = await t.read();
  const cpu0 = t.pids.map(cpuTimes);
  const m0 = t.metricsUrl !== undefined ? await scrape(t.metricsUrl) : undefined;
  // The embedded process has no Redis.
  const redis0 = t.redis !== undefined ? await redisStats(t.redis) : undefined;
  const r = await load(`hot-${run}`, o.measureS);
  const redis1 = t.redis !== undefined ? await redisStats(t.redis) : undefined;
  const m1 = t.metricsUrl !== undefined ? await scrape(t.metricsUrl) : undefined;
  const cpu1 = t.pids.map(cpuTimes);
  const cpuEach = cpu1.map((c, i) => round(c.user + c.system - cpu0[i].user - cpu0[i].system, 2));
  const systemEach = cpu1.map((c, i) => round(c.system - cpu0[i].system, 2));
  const cpu = round(
    cpuEach.reduce((sum, c) => sum + c, 0),
    2,
  );
  await sleep(SETTLE_MS);
  const after = await t.read();
  const sent = r.sent.reduce((a, b) => a + b, 0);
  const moved = after - before;
  const result = {
    driver: r.driver,
    requestsPerS: r.requestsPerS,
    p50Ms: round(r.p50Ms, 2),
    p99Ms: round(r.p99Ms, 2),
    ok: r.ok,
    failed: r.failed,
    socketErrors: r.socketErrors,
    sent,
    counterMoved: moved,
    serverCpuSeconds: cpu,
    /** CPU seconds of each server process in the window, named as `t.names`. */
    cpuSecondsByProcess: Object.fromEntries(t.names.map((name, i) => [name, cpuEach[i]])),
    /** Of which in the kernel (system time): socket reads and writes, mostly. */
    systemCpuSecondsByProcess: Object.fromEntries(t.names.map((name, i) => [name, systemEach[i]])),
    requestsPerServerCpuSecond: Math.round(r.ok / cpu),
    ...(redis0 !== undefined && redis1 !== undefined
      ? {
          /**
           * Redis commands per 2xx answer in the window, those scripts run included
           * (commandstats), and of them script calls: what group commit shares among increments.
           */
          redisCommandsPerIncrement: perIncrement(redis0, redis1, r.ok),
          redisScriptCallsPerIncrement: perIncrement(redis0, redis1, r.ok, ["evalsha", "eval"]),
        }
      : {}),
    ...(r.firstError !== undefined ? { firstError: r.firstError } : {}),
  };
  if (m0 !== undefined && m1 !== undefined) {
    const d = (name) => metricSum(m1, name) - metricSum(m0, name);
    // How many increments one gateway -> owner bus request carried, on average.
    result.incrementsPerBusRequest = round(
      d("livecount_gateway_increments_sent_total") / d("livecount_gateway_increment_requests_total"),
      1,
    );
  }
  result.exact =
    moved >= r.ok && moved <= sent && (await t.verify(`hot-${run}`, r.sent, before, moved, result));
  log(
    `hotpage/${name}: ${result.requestsPerS} req/s, p50 ${result.p50Ms} ms, p99 ${result.p99Ms} ms ` +
      `(${r.driver}); ${r.ok} 2xx, ${r.failed} failed, ${sent} sent, counter +${moved}, exact ${result.exact}`,
  );
  return result;
}

/** Calls per 2xx answer between two redisStats, of `only` these commands or of all. */
function perIncrement(before, after, ok, only = undefined) {
  const calls = Object.entries(callDeltas(before, after))
    .filter(([name]) => only === undefined || only.includes(name))
    .reduce((sum, [, n]) => sum + n, 0);
  return round(calls / ok, 3);
}

/** The page's counter through the public API. */
async function readApi(baseUrl) {
  const res = await globalThis.fetch(`${baseUrl}${PATH}`);
  if (res.status !== 200) throw new Error(`GET ${PATH} answered ${res.status}`);
  return (await res.json()).counters[COUNTER] ?? 0;
}

/**
 * Sends every key of the window again in batches: the ones that landed must be duplicates, the rest
 * count now; afterwards the counter has moved by exactly the keys sent.
 */
async function replayAll(baseUrl, prefix, sentPerThread, before, moved, result) {
  let batch = [];
  let duplicates = 0;
  let fresh = 0;
  let errors = 0;
  const send = async () => {
    const res = await globalThis.fetch(`${baseUrl}/v1/counters/increment`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${PUBLISHER_KEY}` },
      body: JSON.stringify(batch),
    });
    if (res.status !== 200) throw new Error(`replay answered ${res.status}: ${await res.text()}`);
    for (const item of (await res.json()).results) {
      if (item.error !== undefined) errors++;
      else if (item.duplicate) duplicates++;
      else fresh++;
    }
    batch = [];
  };
  for (const id of keysSent(prefix, sentPerThread)) {
    batch.push({ page: PAGE, counter: COUNTER, change: 1, id });
    if (batch.length === REPLAY_BATCH) await send();
  }
  if (batch.length > 0) await send();
  const total = (await readApi(baseUrl)) - before;
  Object.assign(result, { replayDuplicates: duplicates, replayCounted: fresh, replayErrors: errors });
  return errors === 0 && duplicates === moved && total === result.sent;
}

async function livecountSide(o, dir, log) {
  const nats = await startNats(dir);
  const redis = await startRedis(dir);
  const client = new Redis(redis.url);
  const procs = [];
  try {
    const common = { LIVECOUNT_NATS_URL: nats.url, LIVECOUNT_REDIS_URL: redis.url, LIVECOUNT_DC: "dc1" };
    const counter = await startCounterNode(dir, "hot-counter", common);
    procs.push(counter);
    const port = await freePort();
    const gateway = spawnProduct(
      "gateway",
      "apps/gateway/dist/main.js",
      {
        ...common,
        ...UNLIMITED_PUBLISHER,
        LIVECOUNT_NODE_ID: "hot-gateway",
        LIVECOUNT_PORT: String(port),
        LIVECOUNT_HOST: "127.0.0.1",
        LIVECOUNT_PUBLISHER_KEYS: PUBLISHER_KEY,
      },
      dir,
    );
    procs.push(gateway);
    const baseUrl = `http://127.0.0.1:${port}`;
    await waitHttp(`${baseUrl}/readyz`, "gateway", gateway);
    log(`hotpage/livecount: gateway ${gateway.pid}, counter ${counter.pid}; ${o.connections} connections`);
    return await measure(
      "livecount",
      {
        baseUrl,
        dir,
        pids: [gateway.pid, counter.pid, nats.pid, redis.pid],
        names: ["gateway", "counter", "nats-server", "redis-server"],
        metricsUrl: `${baseUrl}/metrics`,
        redis: client,
        read: () => readApi(baseUrl),
        verify: (prefix, sent, before, moved, result) =>
          replayAll(baseUrl, prefix, sent, before, moved, result),
      },
      o,
      log,
    );
  } finally {
    client.disconnect();
    for (const p of procs.reverse()) await p.stop();
    await nats.stop();
    await redis.stop();
  }
}

async function baselineSide(o, dir, log) {
  const redis = await startRedis(dir, { name: "baseline-redis" });
  const client = new Redis(redis.url);
  const server = forkHelper("hotpage-baseline", BASELINE, [], dir, {
    PORT: "0",
    REDIS_URL: redis.url,
    PUBLISHER_KEY,
  });
  try {
    const { port } = await ask(server, undefined, "listening", 15_000);
    const baseUrl = `http://127.0.0.1:${port}`;
    log(`hotpage/baseline: server ${server.pid}; ${o.connections} connections`);
    const read = async () => Number((await client.hget(`page:${PAGE}`, COUNTER)) ?? 0);
    return await measure(
      "baseline",
      {
        baseUrl,
        dir,
        pids: [server.pid, redis.pid],
        names: ["server", "redis-server"],
        redis: client,
        read,
        verify: async (prefix, sent, before, moved, result) => {
          // One idempotency key per counted increment, warm-up included: the counter is their number.
          const keys = (await client.dbsize()) - 1;
          const value = await read();
          let replayCounted = 0;
          let n = 0;
          for (const id of keysSent(prefix, sent)) {
            if (n === BASELINE_REPLAY_SAMPLE) break;
            n++;
            const res = await globalThis.fetch(`${baseUrl}${PATH}`, {
              method: "PUT",
              headers: { authorization: `Bearer ${PUBLISHER_KEY}`, "idempotency-key": id },
              body: BODY,
            });
            await res.arrayBuffer();
            if (res.headers.get("idempotent-replayed") !== "true") replayCounted++;
          }
          const afterReplay = await read();
          Object.assign(result, { idempotencyKeys: keys, replaySample: n, replayCounted });
          // A sampled key that was in flight at the stop and never landed may count now, once.
          return (
            keys === value && afterReplay - value === replayCounted && replayCounted <= result.sent - moved
          );
        },
      },
      o,
      log,
    );
  } finally {
    client.disconnect();
    await server.stop();
    await redis.stop();
  }
}

async function standaloneSide(o, dir, log) {
  const port = await freePort();
  const proc = spawnProduct(
    "standalone",
    "apps/standalone/dist/main.js",
    {
      ...UNLIMITED_PUBLISHER,
      LIVECOUNT_PORT: String(port),
      LIVECOUNT_HOST: "127.0.0.1",
      LIVECOUNT_PUBLISHER_KEYS: PUBLISHER_KEY,
      LIVECOUNT_DEMO: "0",
    },
    dir,
  );
  try {
    const baseUrl = `http://127.0.0.1:${port}`;
    await waitHttp(`${baseUrl}/readyz`, "standalone", proc);
    return await measure(
      "standalone",
      {
        baseUrl,
        dir,
        pids: [proc.pid],
        names: ["standalone"],
        read: () => readApi(baseUrl),
        verify: (prefix, sent, before, moved, result) =>
          replayAll(baseUrl, prefix, sent, before, moved, result),
      },
      o,
      log,
    );
  } finally {
    await proc.stop();
  }
}

export async function hotpageBench(options = {}, log = console.error) {
  const o = { ...defaults, ...options };
  const dir = benchDir("hotpage");
  log(`hotpage: driver ${o.nodeDriver !== 1 && wrkBinary() !== undefined ? "wrk" : "node"}`);
  const loadBefore = round(loadavg()[0], 2);
  const livecount = await livecountSide(o, dir, log);
  const baseline = await baselineSide(o, dir, log);
  const standalone = o.standalone === 1 ? await standaloneSide(o, dir, log) : undefined;
  const ratio = round(livecount.requestsPerS / baseline.requestsPerS, 2);
  return {
    config: o,
    driver: livecount.driver,
    loadavg: [loadBefore, round(loadavg()[0], 2)],
    livecount,
    baseline,
    ...(standalone !== undefined ? { standalone } : {}),
    ratioRequestsPerS: ratio,
    goals: {
      vsBaseline: {
        goal: ">= 2x baseline requests/s",
        met: ratio >= 2,
        value: livecount.requestsPerS,
        baseline: baseline.requestsPerS,
        ratio,
        unit: "requests/s",
      },
      p99: {
        goal: `<= 10 ms at ${o.connections} connections`,
        met: livecount.p99Ms <= 10,
        value: livecount.p99Ms,
        unit: "ms",
      },
      exact: {
        goal: "counter moves exactly once per key, both sides",
        met: livecount.exact && baseline.exact && (standalone?.exact ?? true),
        value: livecount.counterMoved,
      },
    },
  };
}
