#!/usr/bin/env node
/**
 * `npm run bench`: builds, then runs every benchmark against real processes (own nats-server and
 * redis-server on free ports), prints a table and the full results as JSON on stdout. Progress goes
 * to stderr. One or more benchmarks can be picked by name:
 *
 *   node loadtest/bench/run.js                    all of them (well over 10 minutes; durationS in the JSON)
 *   node loadtest/bench/run.js counter latency    only these
 *   node loadtest/bench/run.js --quick            smaller sizes, a smoke test (about 1 minute)
 *   node loadtest/bench/run.js latency --set coalesceMs=0   override an option (see each *_bench.js)
 *   npm run bench -- --strict                     exit non-zero when any goal is not met
 *
 * After the table every goal is printed with its value, baseline and ratio (each benchmark's
 * `goals`: { goal, met, value, baseline?, ratio? }). Without --strict the exit code says only whether
 * every benchmark ran; with it, also whether every goal was met.
 *
 * Benchmarks: counter (a: counter node presence events per CPU-second and Redis round trips per
 * event; b: a naive counter with the same events), counter-cluster (the same node on a 3+3 Redis
 * Cluster against one Redis, same events, same run), fanout (c: page updates per gateway CPU-second
 * against a Socket.IO server, one page per socket), fanout-multi (the same with five pages per
 * socket, one counts frame per socket per window), memory (d: gateway RSS per idle viewer), latency (e: join on gateway A -> count on B),
 * multi-dc (f: two data centers: heal -> convergence of 10k active pages, cross-DC like latency),
 * heal-100k (the heal of 100k pages, measured on the stores' digests), bootstrap (a DC joining with
 * an empty Redis learns 100k pages from its peer: time and bytes moved), hotpage (g: exactly-once
 * increments on one page over HTTP, gateway + counter node, against one uWS + Redis process), storm
 * (18,000 tabs reconnecting after a gateway's kill -9 and restart: time until every page is exact)
 * and storm-standalone (the same against the one-process standalone server).
 *
 * Every child process is killed when the run ends, fails or is interrupted (SIGINT/SIGTERM).
 * LC_BENCH_NODE_FLAGS adds node flags to product processes (e.g. "--cpu-prof --cpu-prof-dir=DIR");
 * LC_BENCH_PERF_DIR records the fan-out servers with `perf record -g`; LC_BENCH_KEEP=1 keeps logs.
 */
import { availableParallelism, loadavg } from "node:os";
import { bootstrapBench, largeHealBench } from "./convergence_bench.js";
import { counterBench } from "./counter_bench.js";
import { counterClusterBench } from "./counter_cluster_bench.js";
import { fanoutBench } from "./fanout_bench.js";
import { hotpageBench } from "./hotpage_bench.js";
import { latencyBench } from "./latency_bench.js";
import { installCleanup, machine } from "./lib/processes.js";
import { goalLines, goalTable, table } from "./lib/report.js";
import { memoryBench } from "./memory_bench.js";
import { multiDcBench } from "./multi_dc_bench.js";
import { stormBench } from "./storm_bench.js";

const QUICK = {
  counter: { events: 400_000, naiveEvents: 100_000 },
  "counter-cluster": { events: 300_000 },
  fanout: { sockets: 2000, measureS: 4, warmupS: 2 },
  "fanout-multi": { sockets: 1000, measureS: 4, warmupS: 2 },
  memory: { sockets: 4000, settleS: 2 },
  latency: { joins: 400, joinsPerS: 100 },
  "multi-dc": { pages: 2000, latencyLikes: 200 },
  "heal-100k": { pages: 10_000, sample: 500 },
  bootstrap: { pages: 10_000, sample: 500 },
  hotpage: { warmupS: 2, measureS: 5 },
  storm: { sockets: 3000, pages: 200 },
  "storm-standalone": { sockets: 3000, pages: 200 },
};

const BENCHMARKS = {
  counter: (o) => counterBench(o),
  "counter-cluster": (o) => counterClusterBench(o),
  fanout: (o) => fanoutBench(o),
  "fanout-multi": (o) => fanoutBench({ sockets: 8000, pagesPerSocket: 5, changesPerPagePerS: 3, ...o }),
  memory: (o) => memoryBench(o),
  latency: (o) => latencyBench(o),
  "multi-dc": (o) => multiDcBench(o),
  "heal-100k": (o) => largeHealBench(o),
  bootstrap: (o) => bootstrapBench(o),
  hotpage: (o) => hotpageBench(o),
  storm: (o) => stormBench(o, "gateway"),
  "storm-standalone": (o) => stormBench(o, "standalone"),
};

async function main() {
  installCleanup();
  const args = process.argv.slice(2);
  const quick = args.includes("--quick");
  const strict = args.includes("--strict");
  // --set name=value overrides one option of the selected benchmarks (numbers), e.g. --set coalesceMs=0.
  const overrides = {};
  const names = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i].startsWith("--") && !["--set", "--quick", "--strict"].includes(args[i])) {
      console.error(`unknown option ${args[i]}; options: --quick, --strict, --set name=number`);
      process.exit(2);
    }
    if (args[i] === "--set") {
      const [key, value] = (args[++i] ?? "").split("=");
      if (!key || value === undefined || !Number.isFinite(Number(value))) {
        console.error("--set takes name=number, e.g. --set sockets=8000");
        process.exit(2);
      }
      overrides[key] = Number(value);
    } else if (!args[i].startsWith("--")) names.push(args[i]);
  }
  for (const n of names) {
    if (!(n in BENCHMARKS)) {
      console.error(`unknown benchmark ${n}; choose from ${Object.keys(BENCHMARKS).join(", ")}`);
      process.exit(2);
    }
  }
  const selected = names.length > 0 ? names : Object.keys(BENCHMARKS);
  const started = new Date();
  // Other work on the machine skews wall-clock figures (less so per-CPU-second ones): record it.
  const loadBefore = loadavg().map((x) => Math.round(x * 100) / 100);
  const results = {};
  for (const name of selected) {
    const t0 = Date.now();
    console.error(`\n== ${name}`);
    try {
      results[name] = await BENCHMARKS[name]({ ...(quick ? QUICK[name] : {}), ...overrides });
    } catch (err) {
      console.error(err);
      results[name] = { error: String(err?.message ?? err) };
    }
    results[name].durationS = Math.round((Date.now() - t0) / 1000);
    console.error(`== ${name} done in ${results[name].durationS} s`);
  }
  const loadAfter = loadavg().map((x) => Math.round(x * 100) / 100);
  const env = {
    ...machine(),
    cores: availableParallelism(),
    quick,
    overrides,
    loadavgBefore: loadBefore,
    loadavgAfter: loadAfter,
  };
  console.log(
    `\nlivecount benchmarks, ${started.toISOString()}, node ${env.node}, ${env.cores} cores (${env.cpu}), ` +
      `1-min load average ${loadBefore[0]} before, ${loadAfter[0]} after\n`,
  );
  console.log(table(results));
  const goals = goalLines(results);
  const unmet = goals.filter((l) => !l[6]);
  console.log(`\nGoals: ${goals.length - unmet.length} of ${goals.length} met\n`);
  console.log(goalTable(goals));
  console.log("\nJSON:");
  console.log(JSON.stringify({ started: started.toISOString(), machine: env, results }, null, 2));
  const failed = Object.values(results).some((r) => r.error !== undefined);
  if (strict && unmet.length > 0) {
    console.error(
      `--strict: ${unmet.length} goal(s) not met: ${unmet.map((l) => `${l[0]}.${l[1]}`).join(", ")}`,
    );
  }
  process.exit(failed || (strict && unmet.length > 0) ? 1 : 0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
