#!/usr/bin/env node
/**
 * What other data centers' idempotency keys cost a counter node (apps/counter/src/key_replication.ts),
 * the two figures behind LIVECOUNT_IDEMPOTENCY_IMPORT_MAX_KEYS' default and IMPORT_BATCH:
 *
 * 1. heap: keys as a node queues them for its store, decoded from AppliedKeys messages of 1,000
 *    keys (a UUID key, a 30-character page, the answer as the owner records it), against the bytes
 *    of the same keys on the link (their messages) in the same run;
 * 2. this DC's own increments (one op a call, as a lone like is committed; Redis with one replica,
 *    WAIT 1, as infra/ deploys it) while other DCs' keys are imported back to back, against the
 *    same increments alone in the same run: one import call of IMPORT_BATCH keys over 50
 *    partitions at a time (what the node does), one of 1,024 keys over 256 partitions, and one
 *    WAIT-ed `restoreKeys` per partition (the fenced write an owner makes after a store regression).
 *
 * And 3. where a receiving node's time per key goes (decoding and queueing; `importKeys` alone,
 * with the Redis servers' CPU), 4. the sending owner's CPU per key (KeyReplication.send, encoding
 * and holding included), by keys per commit round, and 5. the sending owner's heap per key it holds
 * for DCs that may miss them (HeldKeys, behind LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS' default).
 *
 * Not part of `run.js`: it sizes a setting and a constant. Needs `npm run build`.
 *
 *   node --expose-gc loadtest/bench/key_import.js [keys=100000] [phaseMs=3000] [cluster]
 *
 * `cluster`: the increments and imports on a Redis Cluster of three masters with a replica each
 * (one script call per partition there: its keys share a slot) instead of one Redis, the keys
 * gathered as a node there gathers them (CLUSTER_IMPORT_GATHER_MS; GATHER_MS=<ms> overrides it).
 */
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import { setImmediate as nextTurn, setTimeout as sleep } from "node:timers/promises";
import { KEYS_SUBJECTS } from "@livecount/bus";
import { partitionOf } from "@livecount/ring";
import { RedisStore } from "@livecount/store";
import { systemClock } from "@livecount/runtime";
import { CLUSTER_IMPORT_GATHER_MS, KeyReplication } from "../../apps/counter/dist/key_replication.js";
import {
  HELD,
  heldHeapPerKey,
  KEY_TTL_MS,
  keysByPartition,
  messagesOf,
  PARTITIONS,
  sendCost,
} from "./lib/key_sending.js";
import { cpuTimes, percentile, round } from "./lib/measure.js";
import { benchDir, installCleanup, startRedis, startRedisCluster } from "./lib/processes.js";

const KEYS = Number(process.argv[2] ?? 100_000);
const PHASE_MS = Number(process.argv[3] ?? 3000);
const CLUSTER = process.argv[4] === "cluster";
const GATHER_MS = Number(process.env.GATHER_MS ?? CLUSTER_IMPORT_GATHER_MS);
/** apps/counter/src/key_replication.ts's IMPORT_BATCH. */
const IMPORT_BATCH = 200;
if (typeof globalThis.gc !== "function") throw new Error("run with node --expose-gc");
installCleanup();

/** A KeyReplication of dc2 on `store`, and how to hand it a message as NATS would. */
function receiver(store, maxQueued = 100_000) {
  let deliver;
  const outcomes = {};
  const replication = new KeyReplication({
    dc: "dc2",
    node: "dc2-n1",
    bus: {
      subscribe: (subjects, handler) => {
        // The other DCs' keys; not acknowledgements of this node's, nor requests to send held keys again.
        if (subjects === KEYS_SUBJECTS) deliver = handler;
        return { unsubscribe() {} };
      },
      publish() {},
    },
    store,
    logger: { warn() {}, error() {}, info() {} },
    metrics: {
      keysAcrossDcs: { inc: ({ outcome }, n = 1) => (outcomes[outcome] = (outcomes[outcome] ?? 0) + n) },
      keysHeld: { set() {} },
    },
    partitions: PARTITIONS,
    keyTtlMs: KEY_TTL_MS,
    enabled: true,
    maxQueued,
    mayBeHeard: () => true,
    // A receiver sends nothing: nothing to hold.
    resendCoalesceMs: 250,
    held: { ...HELD, peers: [], maxKeys: 0 },
    // As a counter node on Redis Cluster gathers keys (GATHER_MS=0 measures without).
    ...(CLUSTER && GATHER_MS > 0 ? { gather: { ms: GATHER_MS, clock: systemClock } } : {}),
  });
  replication.start();
  return { replication, outcomes, deliver: ([data, subject]) => deliver(data, subject) };
}

/** Heap bytes per queued key, and bytes per key on the link. */
async function heapPerKey() {
  // A store that never answers: every key after the first call's stays queued, as behind a slow one.
  const never = { importKeys: () => new Promise(() => {}) };
  const { replication, deliver } = receiver(never, KEYS + IMPORT_BATCH);
  const messages = messagesOf(keysByPartition(KEYS));
  const linkBytes = messages.reduce((n, [data]) => n + data.length, 0);
  globalThis.gc();
  globalThis.gc();
  const before = process.memoryUsage().heapUsed;
  for (const message of messages) deliver(message);
  globalThis.gc();
  globalThis.gc();
  const after = process.memoryUsage().heapUsed;
  replication.stop();
  return {
    keys: KEYS,
    messages: messages.length,
    heapBytesPerKey: round((after - before) / KEYS, 1),
    linkBytesPerKey: round(linkBytes / KEYS, 1),
  };
}

/**
 * Increments of one hot page, one op a call, for PHASE_MS, while `ticks` (each a function, run
 * `everyMs` apart from the start, all built beforehand) hand the node other DCs' keys: latencies,
 * and this process's CPU meanwhile.
 */
async function increments(store, fence, ticks = [], everyMs = 0) {
  let tick = 0;
  const cpu0 = process.cpuUsage();
  const began = performance.now();
  const timer =
    ticks.length === 0
      ? undefined
      : setInterval(() => {
          while (tick < ticks.length && performance.now() - began >= tick * everyMs) ticks[tick++]();
        }, 1);
  const latencies = [];
  let key = 0;
  while (performance.now() - began < PHASE_MS) {
    const t0 = performance.now();
    await store.increment(
      [
        {
          fence,
          page: "hot-page",
          counter: "likes",
          dc: "dc2",
          delta: 1,
          key: `own-${key++}-${randomUUID()}`,
          payload: '{"value":{own},"base":0,"own":{own},"updatedAt":1}',
        },
      ],
      KEY_TTL_MS,
    );
    latencies.push(performance.now() - t0);
  }
  clearInterval(timer);
  const cpu = process.cpuUsage(cpu0);
  latencies.sort((a, b) => a - b);
  return {
    cpuMs: (cpu.user + cpu.system) / 1000,
    increments: latencies.length,
    p50Ms: round(percentile(latencies, 50), 2),
    p99Ms: round(percentile(latencies, 99), 2),
    maxMs: round(latencies.at(-1), 2),
  };
}

/** Until the server at `url`, if a replica, has its master link up. */
async function waitReplicaUp(url) {
  const { Redis } = await import("ioredis");
  const replica = new Redis(url, { lazyConnect: true });
  await replica.connect();
  try {
    for (let i = 0; i < 200; i++) {
      const info = await replica.info("replication");
      if (info.includes("role:master") || info.includes("master_link_status:up")) return;
      await sleep(50);
    }
    throw new Error("the replica never synced");
  } finally {
    replica.disconnect();
  }
}

/** The increments alone, then beside each way of storing other DCs' keys: one row each. */
/** One Redis with a replica, or a cluster of three masters with one each: a store waiting for one. */
async function startStore() {
  const dir = benchDir("key-import");
  if (CLUSTER) {
    const cluster = await startRedisCluster(dir, { masters: 3, replicas: 1 });
    for (const n of cluster.nodes) await waitReplicaUp(n.url);
    const store = await RedisStore.connect({
      cluster: cluster.seeds.split(","),
      waitReplicas: 1,
      partitions: PARTITIONS,
    });
    return { store, servers: cluster.masters.map((m) => m.pid), stop: () => cluster.stop() };
  }
  const primary = await startRedis(dir, { name: "redis-primary" });
  const replica = await startRedis(dir, {
    name: "redis-replica",
    extraArgs: ["--replicaof", "127.0.0.1", String(primary.port)],
  });
  await waitReplicaUp(replica.url);
  const store = await RedisStore.connect({ url: primary.url, waitReplicas: 1, partitions: PARTITIONS });
  return {
    store,
    servers: [primary.pid],
    stop: async () => {
      await replica.stop();
      await primary.stop();
    },
  };
}

/**
 * Where a key's cost goes, no increments beside: a node receiving 200-key rounds spread over the
 * partitions with a store that answers at once (decoding and queueing alone), then `importKeys`
 * called back to back with 200 keys a call on the real store: the node's CPU and the Redis
 * servers' (the masters on a cluster), per key.
 */
async function importCost() {
  const rounds = Array.from({ length: 300 }, (_, i) => messagesOf(keysByPartition(200, 9_000_000 + i * 200)));
  let received = 0;
  const instant = {
    importKeys: async (byPartition) => {
      for (const list of byPartition.values()) received += list.length;
      return 0;
    },
  };
  const { replication, deliver } = receiver(instant);
  let cpu0;
  for (const [i, batch] of rounds.entries()) {
    if (i === 100) [cpu0, received] = [process.cpuUsage(), 0]; // the first 100 warm up
    batch.forEach(deliver);
    await nextTurn();
  }
  replication.leave();
  await replication.drained();
  let cpu = process.cpuUsage(cpu0);
  const receivingUsPerKey = round((cpu.user + cpu.system) / received, 1);

  const { store, servers, stop } = await startStore();
  try {
    const calls = Array.from({ length: 60 }, (_, i) => keysByPartition(200, 8_000_000 + i * 200));
    for (const call of calls.splice(0, 10)) await store.importKeys(call, KEY_TTL_MS); // warm-up
    const serverCpu = () => servers.reduce((n, pid) => n + cpuTimes(pid).user + cpuTimes(pid).system, 0);
    const servers0 = serverCpu();
    cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (const call of calls) await store.importKeys(call, KEY_TTL_MS);
    const ms = performance.now() - t0;
    cpu = process.cpuUsage(cpu0);
    const keys = calls.length * 200;
    return {
      receivingUsPerKey,
      storeCallMs: round(ms / calls.length, 2),
      nodeStoreUsPerKey: round((cpu.user + cpu.system) / keys, 1),
      redisUsPerKey: round(((serverCpu() - servers0) * 1e6) / keys, 1),
    };
  } finally {
    await store.close();
    await stop();
  }
}

async function latencyBehindImports() {
  const { store, stop } = await startStore();
  try {
    const fences = new Map();
    for (let p = 0; p < PARTITIONS; p++) {
      const lease = await store.acquire(p, "bench-node", 600_000);
      if (lease === null) throw new Error(`no lease on partition ${p}`);
      fences.set(p, lease);
    }
    const hot = fences.get(partitionOf("hot-page", PARTITIONS));
    let next = 1_000_000;
    const fresh = (count) => {
      const byPartition = keysByPartition(count, next);
      next += count;
      return byPartition;
    };
    const STEADY_MS = 10;
    const STEADY_KEYS = 200; // 20,000 keys a second: another DC's hot page
    const BURST_MS = 1000;
    const BURST_KEYS = 10_000; // a second of another DC's changes at once
    const steadyTicks = Math.ceil(PHASE_MS / STEADY_MS);
    const burstTicks = Math.ceil(PHASE_MS / BURST_MS);

    await increments(store, hot); // warm-up
    const alone = await increments(store, hot);
    const { cpuMs: aloneCpuMs, ...aloneRow } = alone;
    const rows = [{ beside: "nothing (the baseline)", ...aloneRow }];
    /** A row: the latencies against the baseline's, the keys stored, how long after the phase the
     * last was, and the CPU the keys took this process (its CPU less what its increments took). */
    const row = async (beside, run) => {
      const { result, stored, behindMs } = await run();
      const { cpuMs, ...latencies } = result;
      const incrementsCpuMs = aloneCpuMs * (result.increments / alone.increments);
      rows.push({
        beside,
        ...latencies,
        p50Ratio: round(result.p50Ms / alone.p50Ms, 1),
        p99Ratio: round(result.p99Ms / alone.p99Ms, 1),
        stored,
        behindMs: Math.round(behindMs),
        cpuUsPerKey: round(((cpuMs - incrementsCpuMs) * 1000) / stored, 1),
      });
    };
    const throughReplication = (ticks, everyMs) => async () => {
      const { replication, outcomes, deliver } = receiver(store);
      const messages = Array.from({ length: ticks }, () =>
        messagesOf(fresh(everyMs === STEADY_MS ? STEADY_KEYS : BURST_KEYS)),
      );
      const result = await increments(
        store,
        hot,
        messages.map((m) => () => m.forEach(deliver)),
        everyMs,
      );
      const ended = performance.now();
      replication.leave();
      await replication.drained();
      return { result, stored: outcomes.stored ?? 0, behindMs: performance.now() - ended };
    };
    await row(
      `KeyReplication, ${STEADY_KEYS} keys every ${STEADY_MS} ms`,
      throughReplication(steadyTicks, STEADY_MS),
    );
    await row(
      `KeyReplication, ${BURST_KEYS} keys every ${BURST_MS} ms`,
      throughReplication(burstTicks, BURST_MS),
    );
    await row(`one WAIT-ed restoreKeys per partition, ${BURST_KEYS} keys every ${BURST_MS} ms`, async () => {
      const bursts = Array.from({ length: burstTicks }, () => fresh(BURST_KEYS));
      const writes = [];
      let stored = 0;
      const ticks = bursts.map((byPartition) => () => {
        for (const [p, keys] of byPartition)
          writes.push(store.restoreKeys(fences.get(p), keys, KEY_TTL_MS).then(() => (stored += keys.length)));
      });
      const result = await increments(store, hot, ticks, BURST_MS);
      const ended = performance.now();
      await Promise.all(writes);
      return { result, stored, behindMs: performance.now() - ended };
    });
    return rows;
  } finally {
    await store.close();
    await stop();
  }
}

// First, before the other measures leave memory that a collection within these would free.
const held = [];
for (const n of [1, 10, 100, 1000]) held.push(await heldHeapPerKey(n, KEYS));
const heap = await heapPerKey();
console.log(
  `heap: ${heap.heapBytesPerKey} bytes per queued key (${heap.keys} keys in ${heap.messages} messages), ` +
    `${heap.linkBytesPerKey} bytes per key on the link: ${round(heap.heapBytesPerKey / heap.linkBytesPerKey, 2)}x`,
);
console.log("sending (KeyReplication.send, a round's keys over random pages):");
console.table([1, 10, 100, 1000].map((n) => sendCost(n)));
console.log("held by the sender for DCs that may miss them (heap and buffers per key):");
console.table(held);
console.log("receiving, µs per key, and importKeys alone, 200 keys a call:");
console.table([await importCost()]);
console.log(
  `this DC's increments (one op a call, WAIT 1, ${CLUSTER ? "Redis Cluster 3x2" : "one Redis and a replica"}), ` +
    `${PHASE_MS} ms a phase, beside:`,
);
console.table(await latencyBehindImports());
