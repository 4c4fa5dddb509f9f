/**
 * Benchmarks (a) and (b): presence events per CPU-second of ONE real counter node process, and Redis
 * round trips per event, against a naive counter driven with the same events in the same run.
 *
 * Setup: our own nats-server and redis-server on free ports, `node apps/counter/dist/main.js`, and
 * a separate load process (presence_load.js) sending PresenceBatch requests to the node's subject.
 * CPU comes from the node's /metrics (process_cpu_seconds_total, cross-checked with /proc), round
 * trips from its livecount_counter_store_round_trips_total, cross-checked with Redis INFO. After the
 * load (and the grace window, so leaves have taken effect) every page's count is read back through
 * snapshot requests and from Redis and compared with the driver's truth.
 */
import { nodeSubject } from "@livecount/bus";
import { decodeMessage, encodeMessage, VIEWERS_COUNTER } from "@livecount/protocol";
import { RedisStore } from "@livecount/store";
import { Redis } from "ioredis";
import { connect } from "nats";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { callDeltas, cpuSeconds, metricSum, redisStats, round, scrape } from "./lib/measure.js";
import {
  ask,
  benchDir,
  forkHelper,
  freePort,
  spawnProduct,
  startNats,
  startRedis,
  waitHttp,
} from "./lib/processes.js";

const LOAD_SCRIPT = fileURLToPath(new URL("./presence_load.js", import.meta.url));
const NAIVE_SCRIPT = fileURLToPath(new URL("./naive_counter.js", import.meta.url));
const DC = "dc1";
const NODE_ID = "bench-counter";
/** The counter's default LIVECOUNT_GRACE_MS: leaves take effect this long after they arrive. */
const GRACE_MS = 3000;
/** After the load: the grace window, a sweep and a flush, so every leave is applied and persisted. */
const SETTLE_MS = GRACE_MS + 1500;

export const defaults = {
  events: 3_000_000,
  naiveEvents: 600_000,
  pages: 10_000,
  partitions: 256,
  gateways: 4,
  batchMin: 100,
  batchMax: 500,
  inflight: 32,
  targetViewers: 10,
  seed: 42,
  maxSeconds: 60,
  /** 1: batches grouped by page (`presence_pages`), as gateways send them; 0: `presence` batches of earlier gateways. */
  grouped: 1,
};

async function runLoad(dir, name, config) {
  const load = forkHelper(name, LOAD_SCRIPT, [], dir);
  try {
    return await ask(load, { cmd: "run", config }, "done", (config.maxSeconds + 60) * 1000);
  } finally {
    await load.stop();
  }
}

/** How long Redis may trail the node's memory after the settle wait: a flush or two on a busy machine. */
const DURABLE_WITHIN_MS = 10_000;

/**
 * Reads every page's viewers from the node (snapshot requests) and from the store in Redis (through
 * the product's own RedisStore, so one Redis and a cluster are read alike), against the truth. The
 * node must be exact at once; Redis within DURABLE_WITHIN_MS (pages it trails are read again), and
 * `redisCaughtUpMs` says how long that took.
 */
async function verifyLivecount(nc, store, truth) {
  const pages = Object.keys(truth);
  const subject = nodeSubject(DC, NODE_ID);
  let snapshotMismatches = 0;
  let example;
  let trailing = [];
  const CONCURRENCY = 200;
  const durableOf = (record) => {
    const own = record[VIEWERS_COUNTER]?.[DC];
    return own === undefined ? 0 : own.p - own.n;
  };
  for (let i = 0; i < pages.length; i += CONCURRENCY) {
    const chunk = pages.slice(i, i + CONCURRENCY);
    const replies = await Promise.all(
      chunk.map((page) =>
        nc.request(subject, encodeMessage({ type: "snapshot", page }), { timeout: 10_000 }),
      ),
    );
    const stored = await store.loadMany(chunk);
    chunk.forEach((page, j) => {
      const reply = decodeMessage(replies[j].data);
      const entry = reply.type === "page_state" ? reply.counters[VIEWERS_COUNTER]?.[DC] : undefined;
      const viewers = entry === undefined ? 0 : entry.p - entry.n;
      if (viewers !== truth[page]) {
        snapshotMismatches++;
        example ??= { page, expected: truth[page], node: viewers, redis: durableOf(stored[j]) };
      }
      if (durableOf(stored[j]) !== truth[page]) trailing.push(page);
    });
  }
  const started = Date.now();
  const trailingAtFirst = trailing.length;
  while (trailing.length > 0 && Date.now() - started < DURABLE_WITHIN_MS) {
    await sleep(250);
    const stored = await store.loadMany(trailing);
    trailing = trailing.filter((page, j) => durableOf(stored[j]) !== truth[page]);
  }
  if (trailing.length > 0) {
    const [record] = await store.loadMany([trailing[0]]);
    example ??= { page: trailing[0], expected: truth[trailing[0]], redis: durableOf(record) };
  }
  return {
    pagesChecked: pages.length,
    snapshotMismatches,
    redisMismatches: trailing.length,
    redisTrailingAtFirst: trailingAtFirst,
    redisCaughtUpMs: trailingAtFirst === 0 ? 0 : Date.now() - started,
    example,
  };
}

/** How long the node waits for every entry to be durable, registers included, before the bench gives up. */
const ALL_DURABLE_WITHIN_MS = 90_000;

/**
 * Polls the node's status until no page waits for a flush: when the unique-visitor registers it
 * writes after everything else (durable_writer.ts) are all in the store. Returns ms since `since`, or
 * undefined past ALL_DURABLE_WITHIN_MS.
 */
async function allDurableAfter(nc, since) {
  const subject = nodeSubject(DC, NODE_ID);
  while (Date.now() - since < ALL_DURABLE_WITHIN_MS) {
    const reply = decodeMessage(
      (await nc.request(subject, encodeMessage({ type: "node_status" }), { timeout: 10_000 })).data,
    );
    if (reply.type === "node_info" && reply.dirty === 0) return Date.now() - since;
    await sleep(250);
  }
  return undefined;
}

async function verifyNaive(redis, truth) {
  const pages = Object.keys(truth);
  const pipeline = redis.pipeline();
  for (const page of pages) pipeline.scard(`naive:page:${page}`);
  const counts = await pipeline.exec();
  let mismatches = 0;
  let example;
  pages.forEach((page, i) => {
    if (counts[i][1] !== truth[page]) {
      mismatches++;
      example ??= { page, expected: truth[page], redis: counts[i][1] };
    }
  });
  return { pagesChecked: pages.length, mismatches, example };
}

/**
 * (a): one counter node with the store `store` names (its LIVECOUNT_REDIS_* variables) on
 * `redisNodes` (every server, for Redis's own counts and CPU), driven with `o.events` events and
 * verified; stopped afterwards.
 */
export async function measureCounterNode({ dir, nats, nc, store, redisNodes, loadConfig, o, log, procs }) {
  // --- livecount counter node ---------------------------------------------------------------
  const port = await freePort();
  const counter = spawnProduct(
    "counter",
    "apps/counter/dist/main.js",
    {
      LIVECOUNT_NATS_URL: nats.url,
      ...store,
      LIVECOUNT_NODE_ID: NODE_ID,
      LIVECOUNT_DC: DC,
      LIVECOUNT_PORT: String(port),
      LIVECOUNT_PARTITIONS: String(o.partitions),
      LIVECOUNT_GRACE_MS: String(GRACE_MS),
    },
    dir,
  );
  procs.push(counter);
  const metricsUrl = `http://127.0.0.1:${port}/metrics`;
  await waitHttp(`http://127.0.0.1:${port}/readyz`, "counter node (owning every partition)", counter);
  log(`counter: node ready (pid ${counter.pid}); sending ${o.events} presence events`);

  const m0 = await scrape(metricsUrl);
  const redisClients = redisNodes.map((n) => new Redis(n.url));
  const r0 = await redisNodeStats(redisClients);
  const redis0 = redisNodes.map((n) => cpuSeconds(n.pid));
  const proc0 = cpuSeconds(counter.pid);
  const load = await runLoad(dir, "presence-load-livecount", {
    ...loadConfig,
    subject: nodeSubject(DC, NODE_ID),
    events: o.events,
  });
  const loadEnded = Date.now();
  log(
    `counter: ${load.events} events in ${(load.elapsedMs / 1000).toFixed(1)} s, ${load.errors} errors; ` +
      `waiting ${SETTLE_MS} ms for the grace window and the last flush`,
  );
  await sleep(SETTLE_MS);
  const m1 = await scrape(metricsUrl);
  const d = (name) => metricSum(m1, name) - metricSum(m0, name);
  const flushes = d("livecount_counter_flushes_total");
  const flushMeanMs =
    flushes === 0 ? 0 : round((d("livecount_counter_flush_seconds_sum") / flushes) * 1000, 1);
  log(
    `counter: ${flushes} flushes, mean ${flushMeanMs} ms; ` +
      `${d("livecount_counter_flush_failures_total")} failed, written again`,
  );
  const r1 = await redisNodeStats(redisClients);
  const redisCpu = redisNodes.reduce((sum, n, i) => sum + cpuSeconds(n.pid) - redis0[i], 0);
  for (const c of redisClients) c.disconnect();
  const proc1 = cpuSeconds(counter.pid);
  const reader = await RedisStore.connect(
    store.LIVECOUNT_REDIS_CLUSTER !== undefined
      ? { cluster: store.LIVECOUNT_REDIS_CLUSTER.split(","), partitions: o.partitions }
      : { url: store.LIVECOUNT_REDIS_URL, partitions: o.partitions },
  );
  const check = await verifyLivecount(nc, reader, load.truth).finally(() => reader.close());
  const allDurableMs = await allDurableAfter(nc, loadEnded);
  const cpu = d("process_cpu_seconds_total");
  const roundTrips = d("livecount_counter_store_round_trips_total");
  const calls = callDeltas(r0, r1);
  const pageLoads = calls.hgetall ?? 0;
  const redisCommands = r1.totalCommands - r0.totalCommands;
  const viewersTruth = Object.values(load.truth).reduce((a, b) => a + b, 0);
  const livecount = {
    events: load.events,
    batches: load.batches,
    requestErrors: load.errors,
    firstError: load.firstError,
    stoppedEarly: load.stoppedEarly,
    wallSeconds: round(load.elapsedMs / 1000, 2),
    eventsPerWallSecond: Math.round(load.events / (load.elapsedMs / 1000)),
    cpuSeconds: round(cpu, 2),
    cpuSecondsProc: round(proc1 - proc0, 2),
    eventsPerCpuSecond: Math.round(load.events / cpu),
    presenceOpsApplied: d("livecount_counter_presence_ops_total"),
    storeRoundTrips: roundTrips,
    roundTripsPerEvent: round(roundTrips / load.events, 6),
    pageLoads,
    roundTripsInclLoadsPerEvent: round((roundTrips + pageLoads) / load.events, 6),
    flushes,
    flushFailures: d("livecount_counter_flush_failures_total"),
    flushMeanMs,
    updatesPublished: d("livecount_counter_updates_published_total"),
    redisCommands,
    redisCommandsPerEvent: round(redisCommands / load.events, 6),
    redisCpuSeconds: round(redisCpu, 2),
    redisCalls: calls,
    viewersAtEnd: viewersTruth,
    verify: check,
    // From the last event until no entry waits for a flush (the unique-visitor registers last).
    allDurableMs: allDurableMs ?? null,
  };
  await counter.stop();
  return livecount;
}

/** A run of (a) whose events were all applied, with every page exact at the node and in Redis. */
export function verified(run) {
  return (
    run.verify.snapshotMismatches === 0 &&
    run.verify.redisMismatches === 0 &&
    run.requestErrors === 0 &&
    run.presenceOpsApplied === run.events
  );
}

/** Total commands and per-command calls of several Redis servers (a cluster's masters and replicas). */
async function redisNodeStats(clients) {
  const all = await Promise.all(clients.map((c) => redisStats(c)));
  const calls = {};
  for (const s of all) for (const [name, n] of Object.entries(s.calls)) calls[name] = (calls[name] ?? 0) + n;
  return { totalCommands: all.reduce((sum, s) => sum + s.totalCommands, 0), calls };
}

/** What the load process sends: the same events, by seed, to whichever node it is given. */
export function loadConfigOf(o, nats) {
  return {
    natsUrl: nats.url,
    dc: DC,
    pages: o.pages,
    partitions: o.partitions,
    gateways: o.gateways,
    batchMin: o.batchMin,
    batchMax: o.batchMax,
    inflight: o.inflight,
    targetViewers: o.targetViewers,
    seed: o.seed,
    maxSeconds: o.maxSeconds,
    format: o.grouped === 0 ? "ops" : "pages",
  };
}

/** @param {Partial<typeof defaults>} options */
export async function counterBench(options = {}, log = console.error) {
  const o = { ...defaults, ...options };
  const dir = benchDir("counter");
  const nats = await startNats(dir);
  const redisServer = await startRedis(dir);
  const redis = new Redis(redisServer.url);
  const nc = await connect({ servers: nats.url, name: "bench-verifier" });
  const loadConfig = loadConfigOf(o, nats);
  const procs = [];
  try {
    const livecount = await measureCounterNode({
      dir,
      nats,
      nc,
      store: { LIVECOUNT_REDIS_URL: redisServer.url },
      redisNodes: [redisServer],
      loadConfig,
      o,
      log,
      procs,
    });

    // --- naive baseline ----------------------------------------------------------------------------
    const naive = forkHelper("naive-counter", NAIVE_SCRIPT, [], dir, {
      NATS_URL: nats.url,
      REDIS_URL: redisServer.url,
      SUBJECT: "bench.naive.presence",
    });
    procs.push(naive);
    await ask(naive, undefined, "ready", 15_000);
    log(`counter: naive baseline ready (pid ${naive.pid}); sending ${o.naiveEvents} of the same events`);
    const n0 = cpuSeconds(naive.pid);
    const nr0 = await redisStats(redis);
    const nload = await runLoad(dir, "presence-load-naive", {
      ...loadConfig,
      subject: "bench.naive.presence",
      events: o.naiveEvents,
    });
    const n1 = cpuSeconds(naive.pid);
    const nr1 = await redisStats(redis);
    const nstats = await ask(naive, { cmd: "stats" }, "stats");
    const ncheck = await verifyNaive(redis, nload.truth);
    const ncpu = n1 - n0;
    const baseline = {
      events: nload.events,
      requestErrors: nload.errors,
      stoppedEarly: nload.stoppedEarly,
      wallSeconds: round(nload.elapsedMs / 1000, 2),
      eventsPerWallSecond: Math.round(nload.events / (nload.elapsedMs / 1000)),
      cpuSeconds: round(ncpu, 2),
      eventsPerCpuSecond: Math.round(nload.events / ncpu),
      roundTrips: nstats.commands,
      roundTripsPerEvent: round(nstats.commands / nload.events, 6),
      redisCommandsPerEvent: round((nr1.totalCommands - nr0.totalCommands) / nload.events, 6),
      verify: ncheck,
    };
    await naive.stop();

    return {
      config: o,
      livecount,
      naive: baseline,
      ratioEventsPerCpuSecond: round(livecount.eventsPerCpuSecond / baseline.eventsPerCpuSecond, 1),
      goals: {
        vsNaive: {
          goal: ">= 4x the naive counter's presence events per CPU-second",
          value: livecount.eventsPerCpuSecond,
          baseline: baseline.eventsPerCpuSecond,
          ratio: round(livecount.eventsPerCpuSecond / baseline.eventsPerCpuSecond, 2),
          met: livecount.eventsPerCpuSecond >= 4 * baseline.eventsPerCpuSecond,
        },
        eventsPerCpuSecond: {
          goal: ">= 250,000 presence events per CPU-second",
          value: livecount.eventsPerCpuSecond,
          met: livecount.eventsPerCpuSecond >= 250_000,
        },
        roundTripsPerEvent: {
          goal: "<= 0.01 store round trips per event, page loads included",
          value: livecount.roundTripsInclLoadsPerEvent,
          met: livecount.roundTripsInclLoadsPerEvent <= 0.01,
        },
        verified: {
          goal: "every event applied, every page exact in the node and in Redis",
          value: `${livecount.presenceOpsApplied}/${livecount.events} applied, ${livecount.verify.snapshotMismatches + livecount.verify.redisMismatches} mismatches`,
          met: verified(livecount),
        },
      },
    };
  } finally {
    await nc.close().catch(() => {});
    redis.disconnect();
    for (const p of procs) await p.stop();
    await nats.stop();
    await redisServer.stop();
  }
}
