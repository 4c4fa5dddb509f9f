/**
 * Benchmark (f): two data centers. Per DC a nats-server running infra/nats/dc<N>.conf (joined to
 * the other DC by a NATS gateway through infra/local/link_proxy.mjs, which cuts and heals the
 * link), a redis-server, a counter node and a gateway, each its own process.
 *
 * 1. Heal -> convergence for `pages` active pages: every page gets a like in each DC and both DCs
 *    agree; the link is cut for longer than the DC lease; every page gets another like in each DC
 *    (each side sees its own only); the link is healed and nothing else happens. Measured: from the
 *    heal, and from the moment both NATS gateway connections are back (nats-server re-dials on its
 *    own fixed ~1 s timer), until every page shows the global truth at the watchers of both DCs.
 *    Watchers are WebSockets (50 pages each) recording every count frame with its arrival time.
 * 2. Cross-DC update latency: likes sent at a steady rate to DC1's HTTP API, each timestamped; the
 *    k-th like of a page is visible when a watcher in DC2 (and, for comparison, one in DC1) gets a
 *    count frame with likes >= k. Both ends live in this process, so one clock times them.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import WebSocket from "ws";
import { DCS, DataCenters, PUBLISHER_KEY, waitFor } from "./lib/data_centers.js";
import { cpuSeconds, round, summarize } from "./lib/measure.js";
import { LOOPBACK, benchDir } from "./lib/processes.js";

export const defaults = {
  pages: 10_000,
  /** Pages per watcher socket (the gateway allows 64 by default). */
  pagesPerWatcher: 50,
  /** Items per POST /v1/counters/increment (at most 1000). */
  batch: 500,
  /** A remote DC silent this long is down; the cut lasts longer. */
  dcLeaseMs: 2000,
  coalesceMs: 50,
  latencyPages: 20,
  latencyLikes: 600,
  latencyLikesPerS: 60,
  /** Give up waiting for convergence after this long. */
  timeoutMs: 60_000,
};

function open(url) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    ws.once("open", () => resolve(ws));
    ws.once("error", reject);
  });
}

/**
 * Watchers of `pages` on one gateway: the latest likes of every page and when it arrived, and
 * the time each page first showed the value it shows now.
 */
class Watchers {
  /** page -> { likes, at (performance.now of the frame that set the current value) } */
  latest = new Map();
  sockets = [];
  listeners = new Set();

  static async open(url, pages, perSocket) {
    const w = new Watchers();
    for (let i = 0; i < pages.length; i += perSocket) {
      const ws = await open(url);
      w.sockets.push(ws);
      ws.on("message", (data) => {
        const now = performance.now();
        const frame = JSON.parse(data.toString());
        if (frame.type !== "count") return;
        const likes = frame.counters?.likes ?? 0;
        const prev = w.latest.get(frame.page);
        if (prev === undefined || prev.likes !== likes) w.latest.set(frame.page, { likes, at: now });
        for (const listener of w.listeners) listener(frame.page, likes, now);
      });
      for (const page of pages.slice(i, i + perSocket)) ws.send(JSON.stringify({ type: "watch", page }));
    }
    return w;
  }

  /** Pages not showing `expected(page)` likes. */
  wrong(pages, expected) {
    return pages.filter((p) => this.latest.get(p)?.likes !== expected(p));
  }

  close() {
    for (const ws of this.sockets) ws.terminate();
  }
}

/** @param {Partial<typeof defaults>} options */
export async function multiDcBench(options = {}, log = console.error) {
  const o = { ...defaults, ...options };
  const dir = benchDir("multi-dc");
  const procs = [];
  const watchers = [];
  const closers = [];
  try {
    // --- two data centers joined through the link proxy -----------------------------------------
    const centers = new DataCenters(dir, procs, {
      LIVECOUNT_DC_LEASE_MS: String(o.dcLeaseMs),
      LIVECOUNT_DC_HEARTBEAT_MS: "100",
      // Convergence after the heal must come from the reconnection, not from the periodic comparison.
      LIVECOUNT_ANTI_ENTROPY_MS: "600000",
      LIVECOUNT_COALESCE_MS: String(o.coalesceMs),
      LIVECOUNT_PUBLISHER_RATE: "1000000",
      LIVECOUNT_PUBLISHER_BURST: "1000000",
    });
    closers.push(() => centers.close());
    await centers.startServers();
    for (const dc of DCS) await centers.startDc(dc);
    const gateways = Object.fromEntries(DCS.map((dc) => [dc, centers.dcs[dc].gatewayUrl]));
    const ports = centers.ports;
    const wsUrl = (dc) => `${gateways[dc].replace("http:", "ws:")}/ws`;

    // --- 1. heal -> convergence of `pages` active pages ------------------------------------------
    const pages = Array.from({ length: o.pages }, (_, i) => `mdc-${i}`);
    for (const dc of DCS) watchers.push(await Watchers.open(wsUrl(dc), pages, o.pagesPerWatcher));
    const [w1, w2] = watchers;
    await waitFor(
      "first frames of every page",
      async () => w1.wrong(pages, () => 0).length + w2.wrong(pages, () => 0).length === 0,
      o.timeoutMs,
      100,
    );
    log(`multi-dc: ${o.pages} pages watched in both DCs; one like per page in each DC`);
    await Promise.all(DCS.map((dc) => centers.likeAll(dc, pages, o.batch, `a-${dc}`)));
    await waitFor(
      "both DCs agree before the cut",
      async () => w1.wrong(pages, () => 2).length + w2.wrong(pages, () => 2).length === 0,
      o.timeoutMs,
      100,
    );

    await centers.cut();
    const cutAt = performance.now();
    log(`multi-dc: link cut; one more like per page in each DC`);
    await Promise.all(DCS.map((dc) => centers.likeAll(dc, pages, o.batch, `b-${dc}`)));
    await waitFor(
      "each DC counts its own likes during the cut",
      async () => w1.wrong(pages, () => 3).length + w2.wrong(pages, () => 3).length === 0,
      o.timeoutMs,
      100,
    );
    // Past the DC lease: each side has marked the other down, the heavier path back.
    const cutLeft = o.dcLeaseMs + 500 - (performance.now() - cutAt);
    if (cutLeft > 0) await sleep(cutLeft);
    const cutMs = performance.now() - cutAt;

    // LC_BENCH_PROBE=1: also time, on each DC's NATS, the other DC's updates as they arrive, and the
    // heal's steps: the anti-entropy messages addressed to this DC (lc.ae.<dc>...) and the merged
    // pages its nodes publish to its own gateways (lc.dcupdates.<dc>...).
    const probes = [];
    if (process.env.LC_BENCH_PROBE === "1") {
      const { connect } = await import("nats");
      const { decodeMessage } = await import("@livecount/protocol");
      for (const dc of DCS) {
        const nc = await connect({ servers: `nats://${LOOPBACK}:${ports[dc].client}` });
        const arrivals = [];
        const steps = new Map();
        const step = (name, pages) => {
          const now = performance.now();
          const s = steps.get(name) ?? { messages: 0, pages: 0, first: now, last: now };
          s.messages++;
          s.pages += pages;
          s.last = now;
          steps.set(name, s);
        };
        nc.subscribe("lc.page.>", {
          callback: (_err, msg) => {
            const update = decodeMessage(msg.data);
            if (update.type === "update" && update.dc !== dc) arrivals.push(performance.now());
          },
        });
        for (const subject of [`lc.ae.${dc}`, `lc.ae.${dc}.*`, `lc.dcupdates.${dc}.*`]) {
          nc.subscribe(subject, {
            callback: (_err, msg) => {
              const m = decodeMessage(msg.data);
              const pages = m.pages === undefined ? 0 : Object.keys(m.pages).length;
              step(m.type === "ae_entries" && m.pull !== undefined ? "ae_entries (pull)" : m.type, pages);
            },
          });
        }
        await nc.flush();
        probes.push({ dc, nc, arrivals, steps });
      }
    }
    // CPU of every server process (and of this one: watchers and probes) over the heal window.
    const servers = procs.filter((p) => p.name !== "link");
    const cpu = () => new Map(servers.map((p) => [p.name, cpuSeconds(p.pid)]));
    const cpuBefore = { servers: cpu(), bench: process.cpuUsage() };
    const healAt = performance.now();
    await centers.heal();
    let notLinkedAt = healAt;
    let linkedAt;
    const deadline = healAt + o.timeoutMs;
    let wrong = pages.length * 2;
    while (performance.now() < deadline) {
      const polledAt = performance.now();
      if (linkedAt === undefined) {
        if (await centers.linked().catch(() => false)) linkedAt = performance.now();
        else notLinkedAt = polledAt;
      }
      // When each page converged is the arrival time of its frame, whenever this loop looks: it
      // looks at 20,000 pages every 100 ms, not every 10, to leave the CPU to what it measures.
      if (linkedAt !== undefined) {
        wrong = w1.wrong(pages, () => 4).length + w2.wrong(pages, () => 4).length;
        if (wrong === 0) break;
      }
      await sleep(linkedAt === undefined ? 10 : 100);
    }
    if (wrong > 0) throw new Error(`${wrong} page views not converged ${o.timeoutMs} ms after the heal`);
    const benchCpu = process.cpuUsage(cpuBefore.bench);
    const byProcess = Object.fromEntries(
      [...cpu()].map(([name, s]) => [name, round(s - cpuBefore.servers.get(name), 2)]),
    );
    const windowCpu = {
      wallS: round((performance.now() - healAt) / 1000, 2),
      serversCpuS: round(
        Object.values(byProcess).reduce((a, b) => a + b, 0),
        2,
      ),
      byProcess,
      benchClientCpuS: round((benchCpu.user + benchCpu.system) / 1e6, 2),
    };
    const convergedAt = Math.max(...watchers.flatMap((w) => pages.map((p) => w.latest.get(p).at)));
    // The links came back at some moment in (notLinkedAt, linkedAt]: the earlier bound never flatters.
    const from = Math.max(healAt, notLinkedAt);
    // How the pages arrived: first, median and last page per DC, from the links being back.
    const spread = Object.fromEntries(
      DCS.map((dc, i) => {
        const ats = Float64Array.from(pages.map((p) => watchers[i].latest.get(p).at - from)).sort();
        const at = (q) => Math.round(ats[Math.min(ats.length - 1, Math.floor(q * ats.length))]);
        return [dc, { firstMs: at(0), medianMs: at(0.5), lastMs: at(1) }];
      }),
    );
    const arrivals = Object.fromEntries(
      probes.map(({ dc, arrivals: a }) => {
        const at = (q) => Math.round(a[Math.min(a.length - 1, Math.floor(q * a.length))] - from);
        return [dc, { updates: a.length, firstMs: at(0), medianMs: at(0.5), lastMs: at(1) }];
      }),
    );
    // Per DC, each kind of message it received during the heal: how many, pages, first and last.
    const healSteps = Object.fromEntries(
      probes.map(({ dc, steps }) => [
        dc,
        Object.fromEntries(
          [...steps]
            .filter(([, s]) => s.last >= healAt)
            .map(([name, s]) => [
              name,
              {
                messages: s.messages,
                pages: s.pages,
                firstMs: Math.round(s.first - from),
                lastMs: Math.round(s.last - from),
              },
            ]),
        ),
      ]),
    );
    await Promise.all(probes.map((p) => p.nc.close()));
    const heal = {
      pages: o.pages,
      cutMs: Math.round(cutMs),
      healToLinkedMs: Math.round(linkedAt - healAt),
      linkedToConvergedMs: Math.round(convergedAt - from),
      healToConvergedMs: Math.round(convergedAt - healAt),
      pagesConvergedFromLinked: spread,
      cpuFromHealToConverged: windowCpu,
      ...(probes.length > 0 ? { updatesArrivedFromLinked: arrivals, healStepsFromLinked: healSteps } : {}),
    };
    log(`multi-dc: ${JSON.stringify(heal)}`);

    // --- 2. cross-DC update latency ---------------------------------------------------------------
    const latPages = Array.from({ length: o.latencyPages }, (_, i) => `mdc-lat-${i}`);
    const local = await Watchers.open(wsUrl("dc1"), latPages, o.pagesPerWatcher);
    const remote = await Watchers.open(wsUrl("dc2"), latPages, o.pagesPerWatcher);
    watchers.push(local, remote);
    await waitFor(
      "first frames of the latency pages",
      async () => local.wrong(latPages, () => 0).length + remote.wrong(latPages, () => 0).length === 0,
      o.timeoutMs,
      50,
    );
    const sentAt = new Map(latPages.map((p) => [p, []]));
    const samples = { local: [], remote: [] };
    for (const [name, w] of [
      ["local", local],
      ["remote", remote],
    ]) {
      const seen = new Map(latPages.map((p) => [p, 0]));
      w.listeners.add((page, likes, now) => {
        const times = sentAt.get(page);
        if (times === undefined) return;
        let k = seen.get(page);
        while (k < likes && k < times.length) samples[name].push(now - times[k++]);
        seen.set(page, k);
      });
    }
    log(`multi-dc: ${o.latencyLikes} likes at ${o.latencyLikesPerS}/s on dc1, watched in dc1 and dc2`);
    const intervalMs = 1000 / o.latencyLikesPerS;
    const started = performance.now();
    const inFlight = [];
    for (let n = 0; n < o.latencyLikes; n++) {
      const wait = started + n * intervalMs - performance.now();
      if (wait > 1) await sleep(wait);
      const page = latPages[n % latPages.length];
      sentAt.get(page).push(performance.now());
      inFlight.push(
        globalThis
          .fetch(`${gateways.dc1}/v1/pages/${page}/counter`, {
            method: "PUT",
            headers: {
              authorization: `Bearer ${PUBLISHER_KEY}`,
              "content-type": "application/json",
              "idempotency-key": `lat-${n}`,
            },
            body: JSON.stringify({ action: "increment", counter: "likes", by: 1 }),
          })
          .then((res) => res.arrayBuffer()),
      );
    }
    await Promise.all(inFlight);
    await waitFor(
      "every like seen in both DCs",
      async () => samples.local.length + samples.remote.length === 2 * o.latencyLikes,
      10_000,
      20,
    ).catch(() => {});
    const latency = Object.fromEntries(
      Object.entries(samples).map(([name, s]) => {
        const sum = summarize(s);
        return [
          name,
          {
            seen: sum.count,
            p50Ms: round(sum.p50, 1),
            p90Ms: round(sum.p90, 1),
            p99Ms: round(sum.p99, 1),
            maxMs: round(sum.max, 1),
          },
        ];
      }),
    );
    log(`multi-dc: latency ${JSON.stringify(latency)}`);

    return {
      config: o,
      heal,
      latency: { likes: o.latencyLikes, coalesceMs: o.coalesceMs, ...latency },
      goals: {
        healConvergence: {
          goal: "<= 1000 ms from the link being back (healed and NATS gateways re-established)",
          value: heal.linkedToConvergedMs,
          unit: "ms",
          met: heal.linkedToConvergedMs <= 1000,
        },
      },
    };
  } finally {
    for (const w of watchers) w.close();
    for (const close of closers) await close();
    for (const p of procs.reverse()) await p.stop();
  }
}
