/**
 * What `npm run bench` prints: the summary table (a few rows per benchmark) and the goal lines
 * (every goal of every benchmark with its value, baseline and ratio; loadtest/bench/run.js).
 */
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
          "every entry durable, registers too (after last event)",
          lc.allDurableMs === null ? "not within 90 s" : `${fmt(lc.allDurableMs)} ms`,
          "",
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
          "  Redis commands (of them script calls) per increment",
          `${lc.redisCommandsPerIncrement} (${lc.redisScriptCallsPerIncrement})`,
          `${b.redisCommandsPerIncrement} (${b.redisScriptCallsPerIncrement})`,
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

export function table(results) {
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
export function goalLines(results) {
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

export function goalTable(lines) {
  const header = ["benchmark", "goal", "target", "value", "baseline", "ratio", "met"];
  return aligned(
    header,
    lines.map((l) => [...l.slice(0, 6).map(fmt), l[6] ? "yes" : "NO"]),
  );
}
