/**
 * Store.increment alone, against its own redis-server: the CPU an increment costs the counter
 * node's store client and Redis, per op, at a given number of ops per call (what group commit puts
 * in one script call). One page, one partition, the window bucket with every op, as a counter node
 * sends them; calls one after the other. Not part of `run.js`: a tool for the hot page's profile.
 *
 *   node loadtest/bench/store_increments.js [opsPerCall=20] [calls=2000]
 *
 * Prints client CPU (this process, user + system) and Redis CPU per op, and ops/s.
 */
import { performance } from "node:perf_hooks";
import { partitionOf } from "@livecount/ring";
import { RedisStore } from "@livecount/store";
import { cpuTimes, round } from "./lib/measure.js";
import { benchDir, startRedis } from "./lib/processes.js";

const B = Number(process.argv[2] ?? 20);
const N = Number(process.argv[3] ?? 2000);
const PAGE = "hot-page";
const KEY_TTL_MS = 86_400_000;
const WARM_CALLS = 200;

const redis = await startRedis(benchDir("store-increments"));
try {
  const store = await RedisStore.connect({ url: redis.url });
  const fence = await store.acquire(partitionOf(PAGE, 256), "bench-node", 600_000);
  if (fence === null) throw new Error("no lease");
  let key = 0;
  const minute = Math.floor(Date.now() / 60_000);
  const call = () =>
    store.increment(
      Array.from({ length: B }, () => ({
        fence,
        page: PAGE,
        counter: "likes",
        dc: "dc1",
        delta: 1,
        key: `k${key++}`,
        also: [{ counter: `@w:likes:${minute}`, delta: 1 }],
        payload: '{"value":1,"base":0,"own":{own},"updatedAt":1}',
      })),
      KEY_TTL_MS,
    );
  for (let i = 0; i < WARM_CALLS; i++) await call();
  const client0 = process.cpuUsage();
  const redis0 = cpuTimes(redis.pid);
  const t0 = performance.now();
  for (let i = 0; i < N; i++) await call();
  const ms = performance.now() - t0;
  const client = process.cpuUsage(client0);
  const redis1 = cpuTimes(redis.pid);
  const ops = B * N;
  const redisUs = (redis1.user + redis1.system - redis0.user - redis0.system) * 1e6;
  console.log(
    `${B} ops per call: client ${round((client.user + client.system) / ops, 2)} us/op, ` +
      `redis ${round(redisUs / ops, 2)} us/op, ${Math.round((ops / ms) * 1000)} ops/s`,
  );
  await store.close();
} finally {
  await redis.stop();
}
