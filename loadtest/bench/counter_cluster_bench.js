/**
 * The counter node on Redis Cluster against the same node on one Redis, in the same run: the same
 * seeded presence events (benchmark a's load) sent to one counter node whose store is first one
 * redis-server, then a Redis Cluster of 3 masters with a replica each (LIVECOUNT_REDIS_CLUSTER),
 * both verified page by page afterwards. What differs is the store's client side: on a cluster a
 * flush sends one pipeline per partition it touches instead of one for all of them. Redis's side is
 * reported too (commands per event and CPU of the masters), since that is what the cluster spreads.
 */
import { connect } from "nats";
import { loadConfigOf, measureCounterNode, verified, defaults as counterDefaults } from "./counter_bench.js";
import { round } from "./lib/measure.js";
import { benchDir, startNats, startRedis, startRedisCluster } from "./lib/processes.js";

export const defaults = {
  ...counterDefaults,
  events: 1_500_000,
  masters: 3,
  replicas: 1,
};

/** @param {Partial<typeof defaults>} options */
export async function counterClusterBench(options = {}, log = console.error) {
  const o = { ...defaults, ...options };
  const dir = benchDir("counter-cluster");
  const nats = await startNats(dir);
  const redis = await startRedis(dir);
  const cluster = await startRedisCluster(dir, { masters: o.masters, replicas: o.replicas });
  const nc = await connect({ servers: nats.url, name: "bench-verifier" });
  const loadConfig = loadConfigOf(o, nats);
  const procs = [];
  const run = (store, redisNodes) =>
    measureCounterNode({ dir, nats, nc, store, redisNodes, loadConfig, o, log, procs });
  try {
    log(`counter-cluster: one Redis (port ${redis.port})`);
    const one = await run({ LIVECOUNT_REDIS_URL: redis.url }, [redis]);
    log(`counter-cluster: Redis Cluster, ${o.masters} masters x ${1 + o.replicas} (${cluster.seeds})`);
    const onCluster = await run({ LIVECOUNT_REDIS_CLUSTER: cluster.seeds }, cluster.masters);
    return {
      config: o,
      one,
      cluster: onCluster,
      ratioEventsPerCpuSecond: round(onCluster.eventsPerCpuSecond / one.eventsPerCpuSecond, 2),
      goals: {
        verified: {
          goal: "both sides apply every event, every page exact",
          value: `${onCluster.presenceOpsApplied}/${onCluster.events} and ${one.presenceOpsApplied}/${one.events} applied`,
          met: verified(one) && verified(onCluster),
        },
      },
    };
  } finally {
    await nc.close().catch(() => {});
    for (const p of procs) await p.stop();
    await cluster.stop();
    await redis.stop();
    await nats.stop();
  }
}
