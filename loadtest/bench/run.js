#!/usr/bin/env node
/**
 * `npm run bench`: builds, then runs every benchmark against real processes (own nats-server and
 * redis-server on free ports), prints a table and the full results as JSON on stdout. Progress goes
 * to stderr. One or more benchmarks can be picked by name:
 *
 *   node loadtest/bench/run.js                    all of them (about 4 minutes)
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

const fmt = (x) =>
  typeof x === "number" ? (Number.isInteger(x) ? x.toLocaleString("en-US") : String(x)) : (x ?? "");
const yes = (met) => (met === undefined ? "" : met ? "yes" : "NO");

/** Rows of the summary table: benchmark, measure, livecount, baseline, ratio, goal, met. */
function rows(name, r) {
  if (r.error !== undefined) return [[name, "FAILED", r.error, "", "", "", ""]];
  switch (name) {
    case "counter": {
      const lc = r.livecount;
      return [
        [
          name,
          "presence events / CPU-second",
          lc.eventsPerCpuSecond,
          r.naive.eventsPerCpuSecond,
          `${r.ratioEventsPerCpuSecond}x`,
          ">= 4x and >= 250,000",
          `${yes(r.goals.vsNaive.met)} / ${yes(r.goals.eventsPerCpuSecond.met)}`,
        ],
        [
          name,
          "store round trips / event (node metric)",
          lc.roundTripsPerEvent,
          r.naive.roundTripsPerEvent,
          "",
          "<= 0.01",
          "",
        ],
        [
          name,
          "round trips / event incl. page loads",
          lc.roundTripsInclLoadsPerEvent,
          r.naive.roundTripsPerEvent,
          "",
          "<= 0.01",
          yes(r.goals.roundTripsPerEvent.met),
        ],
        [
          name,
          "Redis commands / event (INFO, incl. in Lua)",
          lc.redisCommandsPerEvent,
          r.naive.redisCommandsPerEvent,
          "",
          "",
          "",
        ],
        [
          name,
          "events applied and verified",
          `${fmt(lc.presenceOpsApplied)}/${fmt(lc.events)}, ${lc.verify.snapshotMismatches + lc.verify.redisMismatches} mismatches`,
          `${fmt(r.naive.events)}, ${r.naive.verify.mismatches} mismatches`,
          "",
          "0 mismatches",
          yes(r.goals.verified.met),
        ],
      ];
    }
    case "counter-cluster": {
      const one = r.one;
      const rc = r.cluster;
      return [
        [
          name,
          `presence events / CPU-second, Redis Cluster (${r.config.masters}x${1 + r.config.replicas}) vs one Redis`,
          rc.eventsPerCpuSecond,
          one.eventsPerCpuSecond,
          `${r.ratioEventsPerCpuSecond}x`,
          "",
          "",
        ],
        [
          name,
          "Redis commands / event, masters' CPU s",
          `${rc.redisCommandsPerEvent}, ${rc.redisCpuSeconds}`,
          `${one.redisCommandsPerEvent}, ${one.redisCpuSeconds}`,
          "",
          "",
          "",
        ],
        [
          name,
          "events applied and verified (cluster / one)",
          `${fmt(rc.presenceOpsApplied)}/${fmt(rc.events)}, ${rc.verify.snapshotMismatches + rc.verify.redisMismatches} mismatches`,
          `${fmt(one.presenceOpsApplied)}/${fmt(one.events)}, ${one.verify.snapshotMismatches + one.verify.redisMismatches} mismatches`,
          "",
          "0 mismatches",
          yes(r.goals.verified.met),
        ],
      ];
    }
    case "fanout":
    case "fanout-multi": {
      const lc = r.livecount;
      const sio = r.socketio;
      const per = `${fmt(r.config.sockets)} sockets x ${r.config.pagesPerSocket} page(s)`;
      const frames = r.config.counts === 0 ? "count frames" : "counts frames";
      const pct = (x) => `${Math.round(x * 1000) / 10}%`;
      return [
        [
          name,
          `page updates / server CPU-second (${per}; livecount: ${frames})`,
          lc.pageUpdatesPerCpuSecond,
          sio.pageUpdatesPerCpuSecond,
          `${r.ratioPageUpdatesPerCpuSecond}x`,
          r.goals.vsSocketIo?.goal ?? "",
          yes(r.goals.vsSocketIo?.met),
        ],
        [
          name,
          "server CPU s (user + system) in window; user share",
          `${lc.serverUserCpuSeconds} + ${lc.serverSystemCpuSeconds}; ${pct(lc.userCpuShare)}`,
          `${sio.serverUserCpuSeconds} + ${sio.serverSystemCpuSeconds}; ${pct(sio.userCpuShare)}`,
          "",
          r.goals.userCpuShare?.goal ?? "",
          yes(r.goals.userCpuShare?.met),
        ],
        [
          name,
          "page updates / server user-CPU-second",
          Math.round(lc.pageUpdatesDelivered / lc.serverUserCpuSeconds),
          Math.round(sio.pageUpdatesDelivered / sio.serverUserCpuSeconds),
          "",
          "",
          "",
        ],
        [
          name,
          "page updates / wall-second (per frame)",
          `${fmt(lc.pageUpdatesPerWallSecond)} (${lc.pageUpdatesPerFrame})`,
          `${fmt(sio.pageUpdatesPerWallSecond)} (${sio.pageUpdatesPerFrame})`,
          "",
          "",
          "",
        ],
        [
          name,
          "watchers missing the final value",
          lc.watchersMissingFinalValue,
          sio.watchersMissingFinalValue,
          "",
          "0",
          yes(r.goals.delivered.met),
        ],
      ];
    }
    case "memory":
      return [
        [
          name,
          `gateway RSS / idle joined viewer, bytes (${fmt(r.viewers)} viewers; baseline: bare uWS)`,
          r.rssPerViewerBytes,
          r.goals.rssPerViewer.baseline ?? "",
          r.goals.rssPerViewer.ratio !== undefined ? `${r.goals.rssPerViewer.ratio}x` : "",
          "<= 1,200",
          yes(r.goals.rssPerViewer.met),
        ],
        [
          name,
          "  of which V8 heap used / viewer, bytes",
          r.heapUsedPerViewerBytes,
          r.floor?.heapUsedPerViewerBytes ?? "",
          "",
          "",
          "",
        ],
        [
          name,
          "  RSS / viewer, second half only, bytes",
          r.rssPerViewerSecondHalfBytes,
          r.floor?.rssPerViewerSecondHalfBytes ?? "",
          "",
          "",
          "",
        ],
      ];
    case "latency":
      return [
        [
          name,
          `join on A -> count on B, ms (${fmt(r.seen)}/${fmt(r.joins)} joins seen)`,
          `p50 ${r.p50Ms} / p99 ${r.p99Ms} / max ${r.maxMs}`,
          "",
          "",
          `p99 <= ${50 + r.coalesceMs} (coalesce ${r.coalesceMs} ms)`,
          yes(r.goals.p99.met),
        ],
      ];
    case "heal-100k":
      return [
        [
          name,
          `heal -> both stores identical, ms (${fmt(r.pages)} pages changed on both sides)`,
          `${r.linkedToSameStateMs} from links back, ${r.healToSameStateMs} from heal`,
          "",
          "",
          "<= 5,000 from links back",
          yes(r.goals.heal.met),
        ],
        [
          name,
          "  sampled pages exact in both DCs afterwards",
          `${fmt(r.sampleChecked - r.sampleWrong)}/${fmt(r.sampleChecked)}`,
          "",
          "",
          "all",
          yes(r.goals.exact.met),
        ],
      ];
    case "bootstrap":
      return [
        [
          name,
          `new DC (empty Redis) ready, ms (${fmt(r.pages)} pages in its peer)`,
          r.startToReadyMs,
          "",
          "",
          "",
          "",
        ],
        [
          name,
          "  new DC's store identical to its peer's, ms from start",
          r.startToSameStateMs,
          "",
          "",
          "",
          "",
        ],
        [
          name,
          "  anti-entropy bytes sent (peer / new DC)",
          `${fmt(r.bytesSent.dc1)} / ${fmt(r.bytesSent.dc2)} (${r.bytesPerPage} B per page)`,
          "",
          "",
          "",
          "",
        ],
        [
          name,
          "  sampled pages exact in the new DC",
          `${fmt(r.sampleChecked - r.sampleWrong)}/${fmt(r.sampleChecked)}`,
          "",
          "",
          "all",
          yes(r.goals.exact.met),
        ],
      ];
    case "multi-dc":
      return [
        [
          name,
          `heal -> all DCs exact, ms (${fmt(r.heal.pages)} pages changed on both sides)`,
          `${r.heal.linkedToConvergedMs} from links back, ${r.heal.healToConvergedMs} from heal`,
          "",
          "",
          "<= 1,000 from links back",
          yes(r.goals.healConvergence.met),
        ],
        [name, "  heal -> NATS gateway links back, ms", r.heal.healToLinkedMs, "", "", "", ""],
        [
          name,
          `like on dc1 -> watcher on dc2, ms (${fmt(r.latency.remote.seen)}/${fmt(r.latency.likes)} seen)`,
          `p50 ${r.latency.remote.p50Ms} / p99 ${r.latency.remote.p99Ms} / max ${r.latency.remote.maxMs}`,
          "",
          "",
          "",
          "",
        ],
        [
          name,
          "  like on dc1 -> watcher on dc1 (same run), ms",
          `p50 ${r.latency.local.p50Ms} / p99 ${r.latency.local.p99Ms} / max ${r.latency.local.maxMs}`,
          "",
          "",
          "",
          "",
        ],
      ];
    case "hotpage": {
      const lc = r.livecount;
      const b = r.baseline;
      const latency = (x) => `p50 ${x.p50Ms} / p99 ${x.p99Ms}`;
      const out = [
        [
          name,
          `exactly-once increments / s, one page, ${r.config.connections} connections (${r.driver})`,
          lc.requestsPerS,
          b.requestsPerS,
          `${r.ratioRequestsPerS}x`,
          ">= 2x",
          yes(r.goals.vsBaseline.met),
        ],
        [name, "  latency, ms", latency(lc), latency(b), "", "p99 <= 10", yes(r.goals.p99.met)],
        [
          name,
          "  requests / server CPU-second (all processes)",
          lc.requestsPerServerCpuSecond,
          b.requestsPerServerCpuSecond,
          "",
          "",
          "",
        ],
        [
          name,
          "  counter moved / 2xx / sent, exact",
          `${fmt(lc.counterMoved)} / ${fmt(lc.ok)} / ${fmt(lc.sent)}, ${lc.exact}`,
          `${fmt(b.counterMoved)} / ${fmt(b.ok)} / ${fmt(b.sent)}, ${b.exact}`,
          "",
          "exact",
          yes(r.goals.exact.met),
        ],
      ];
      if (r.standalone !== undefined)
        out.push([
          name,
          "  embedded (npm start), req/s, ms",
          `${fmt(r.standalone.requestsPerS)}, ${latency(r.standalone)}`,
          "",
          "",
          "",
          "",
        ]);
      return out;
    }
    case "storm":
    case "storm-standalone":
      return [
        [
          name,
          `restart -> every page exact, ms (${fmt(r.sockets)} tabs, ${fmt(r.viewers)} viewers, ${fmt(r.pages)} pages)`,
          r.goals.exactAfterRestart.value,
          "",
          "",
          "<= 3,000",
          yes(r.goals.exactAfterRestart.met),
        ],
        [
          name,
          "  listening / tabs back p50, p99, max, ms",
          `${r.listeningMs} / ${r.tabsBackP50Ms}, ${r.tabsBackP99Ms}, ${r.tabsBackMaxMs}`,
          "",
          "",
          "",
          "",
        ],
      ];
    default:
      return [];
  }
}

function table(results) {
  const header = ["benchmark", "measure", "livecount", "baseline", "ratio", "goal", "met"];
  const body = Object.entries(results).flatMap(([name, r]) => rows(name, r).map((row) => row.map(fmt)));
  return aligned(header, body);
}

function aligned(header, body) {
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((row) => String(row[i]).length)));
  const line = (row) => row.map((c, i) => String(c).padEnd(widths[i])).join(" | ");
  return [line(header), widths.map((w) => "-".repeat(w)).join("-|-"), ...body.map(line)].join("\n");
}

/**
 * Every goal of every benchmark run: [benchmark, key, goal, value, baseline, ratio, met]. A benchmark
 * that failed is one unmet line.
 */
function goalLines(results) {
  return Object.entries(results).flatMap(([name, r]) => {
    if (r.error !== undefined) return [[name, "(run)", "the benchmark runs", r.error, "", "", false]];
    return Object.entries(r.goals ?? {}).map(([key, g]) => [
      name,
      key,
      g.goal ?? "",
      g.value ?? "",
      g.baseline ?? "",
      g.ratio === undefined ? "" : `${g.ratio}x`,
      g.met === true,
    ]);
  });
}

function goalTable(lines) {
  const header = ["benchmark", "goal", "target", "value", "baseline", "ratio", "met"];
  return aligned(
    header,
    lines.map((l) => [...l.slice(0, 6).map(fmt), l[6] ? "yes" : "NO"]),
  );
}

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
