/**
 * Store.write of unique-visitor registers alone, against its own redis-server: the Redis time a
 * counter node's flushes of registers cost, per register. 4,000 pages, `perPage` new registers of
 * today each, written in flushes of 20,000 entries (LIVECOUNT_FLUSH_MAX_WRITES's default) grouped by
 * partition, as the node's flushes write them once the viewers are written. Not part of `run.js`: a
 * tool for the counter's profile (docs/benchmarks.md, "Unique-visitor registers after every other
 * entry").
 *
 *   node loadtest/bench/store_writes.js [perPage=100] [rounds=3]
 *
 * Prints, per round (the store emptied before each), the time Redis spent in the write scripts
 * (INFO commandstats) and the wall time, in µs per register.
 */
import { performance } from "node:perf_hooks";
import { dayOf, uniqueRegisterOf } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { RedisStore } from "@livecount/store";
import { Redis } from "ioredis";
import { round } from "./lib/measure.js";
import { benchDir, startRedis } from "./lib/processes.js";

const PER_PAGE = Number(process.argv[2] ?? 100);
const ROUNDS = Number(process.argv[3] ?? 3);
const PAGES = 4_000;
const PARTITIONS = 256;
const FLUSH_ENTRIES = 20_000;

/** Microseconds Redis has spent running EVALSHA so far. */
async function scriptUs(admin) {
  return Number(/cmdstat_evalsha:calls=\d+,usec=(\d+)/.exec(await admin.info("commandstats"))?.[1] ?? 0);
}

/** Every page's registers, page after page, as flushes would take them. */
function registerWrites() {
  const day = dayOf(Date.now());
  const writes = [];
  for (let i = 0; i < PAGES; i++) {
    const page = `register-page-${i}`;
    for (let r = 0; r < PER_PAGE; r++)
      writes.push({
        page,
        counter: uniqueRegisterOf(day, (r * 37 + i) % 4096),
        dc: "dc1",
        entry: { p: 3, n: 0 },
      });
  }
  return writes;
}

const redis = await startRedis(benchDir("store-writes"));
const admin = new Redis(redis.url);
try {
  for (let r = 0; r < ROUNDS; r++) {
    await admin.flushall();
    const store = await RedisStore.connect({ url: redis.url, partitions: PARTITIONS });
    const fences = [];
    for (let p = 0; p < PARTITIONS; p++) fences.push(await store.acquire(p, "bench-node", 600_000));
    const writes = registerWrites();
    const script0 = await scriptUs(admin);
    const t0 = performance.now();
    for (let at = 0; at < writes.length; at += FLUSH_ENTRIES) {
      const groups = new Map();
      for (const w of writes.slice(at, at + FLUSH_ENTRIES)) {
        const p = partitionOf(w.page, PARTITIONS);
        if (!groups.has(p)) groups.set(p, { fence: fences[p], writes: [] });
        groups.get(p).writes.push(w);
      }
      await store.write([...groups.values()]);
    }
    const wallUs = (performance.now() - t0) * 1000;
    const script = (await scriptUs(admin)) - script0;
    console.log(
      `round ${r + 1}: ${writes.length} registers, ${PER_PAGE} a page; scripts ${round(script / writes.length, 2)} ` +
        `us/register, wall ${round(wallUs / writes.length, 2)} us/register`,
    );
    await store.close();
  }
} finally {
  await admin.quit();
  await redis.stop();
}
