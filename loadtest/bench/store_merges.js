/**
 * Store.mergePages alone, against its own redis-server: the CPU a heal's merges cost the counter
 * node's store client and Redis, per page. Pages of three counters (a like from two DCs, their
 * minute's window bucket, another DC's viewers), every entry new, spread over 256 partitions and
 * merged one partition per call, all partitions at once, as anti-entropy merges what it receives.
 * Not part of `run.js`: a tool for the heals' profile.
 *
 *   node loadtest/bench/store_merges.js [pages=20000] [rounds=5]
 *
 * Prints, per round (the store emptied before each), the client's CPU (this process, user +
 * system), Redis's CPU and the time Redis spent in the merge scripts (INFO commandstats), in µs
 * per page; then the same for reading every page back by bucket, as a heal's sender reads them.
 */
import { performance } from "node:perf_hooks";
import { partitionOf } from "@livecount/ring";
import { DIGEST_BUCKETS, RedisStore } from "@livecount/store";
import { Redis } from "ioredis";
import { cpuTimes, round } from "./lib/measure.js";
import { benchDir, startRedis } from "./lib/processes.js";

const N = Number(process.argv[2] ?? 20_000);
const ROUNDS = Number(process.argv[3] ?? 5);
const PARTITIONS = 256;
/** Buckets a heal's sender reads at once (apps/counter/src/anti_entropy.ts). */
const BUCKETS_PER_READ = 64;

/** Microseconds Redis has spent running EVALSHA so far. */
async function scriptUs(admin) {
  return Number(/cmdstat_evalsha:calls=\d+,usec=(\d+)/.exec(await admin.info("commandstats"))?.[1] ?? 0);
}

/** The pages to merge, by partition. */
function pagesByPartition() {
  const minute = Math.floor(Date.now() / 60_000);
  const byPartition = Array.from({ length: PARTITIONS }, () => new Map());
  for (let i = 0; i < N; i++) {
    const page = `merge-page-${i}`;
    byPartition[partitionOf(page, PARTITIONS)].set(page, {
      likes: { dc1: { p: 2 + (i % 3), n: 0 }, dc2: { p: 1 + (i % 5), n: 0 } },
      [`@w:likes:${minute}`]: { dc1: { p: 1, n: 0 }, dc2: { p: 1, n: 0 } },
      "@viewers": { dc2: { p: 3, n: 1 } },
    });
  }
  return byPartition;
}

const redis = await startRedis(benchDir("store-merges"));
const admin = new Redis(redis.url);
try {
  for (let r = 0; r < ROUNDS; r++) {
    await admin.flushall();
    const store = await RedisStore.connect({ url: redis.url, partitions: PARTITIONS });
    const fences = [];
    for (let p = 0; p < PARTITIONS; p++) fences.push(await store.acquire(p, "bench-node", 600_000));
    const byPartition = pagesByPartition();
    const script0 = await scriptUs(admin);
    const redis0 = cpuTimes(redis.pid);
    const client0 = process.cpuUsage();
    const t0 = performance.now();
    await Promise.all(
      byPartition.map((pages, p) => (pages.size > 0 ? store.mergePages(fences[p], pages, "dc1") : null)),
    );
    const ms = performance.now() - t0;
    const client = process.cpuUsage(client0);
    const redis1 = cpuTimes(redis.pid);
    const script = (await scriptUs(admin)) - script0;
    const redisUs = (redis1.user + redis1.system - redis0.user - redis0.system) * 1e6;
    console.log(
      `round ${r + 1}: ${N} pages in ${Math.round(ms)} ms; client ${round((client.user + client.system) / N, 1)} ` +
        `us/page, redis ${round(redisUs / N, 1)} us/page (scripts ${round(script / N, 1)})`,
    );
    // The same pages read back as a heal's sender reads them: every bucket, 64 at a time.
    const read0 = cpuTimes(redis.pid);
    const readClient0 = process.cpuUsage();
    let read = 0;
    await Promise.all(
      byPartition.map(async (_, p) => {
        for (let b = 0; b < DIGEST_BUCKETS; b += BUCKETS_PER_READ) {
          const buckets = Array.from(
            { length: Math.min(BUCKETS_PER_READ, DIGEST_BUCKETS - b) },
            (_, i) => b + i,
          );
          const pages = await store.bucketPages(p, buckets);
          read += pages.size;
        }
      }),
    );
    const readClient = process.cpuUsage(readClient0);
    const read1 = cpuTimes(redis.pid);
    const readRedisUs = (read1.user + read1.system - read0.user - read0.system) * 1e6;
    console.log(
      `  read back ${read} pages: client ${round((readClient.user + readClient.system) / read, 1)} us/page, ` +
        `redis ${round(readRedisUs / read, 1)} us/page`,
    );
    await store.close();
  }
} finally {
  await admin.quit();
  await redis.stop();
}
