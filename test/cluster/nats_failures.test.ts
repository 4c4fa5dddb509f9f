/**
 * NATS failing under a running one-data-center cluster of real processes (nats-server,
 * redis-server, two counter nodes and two gateways from the built output): restarted in place,
 * down past the gateway lease, and frozen (SIGSTOP) past it. docs/architecture.md ("Failure
 * behaviour", "NATS reconnect"): gateways resync presence and re-take snapshots; BRIEF.md invariant
 * 8: readiness is honest meanwhile, and nothing crashes. After each fault every page must be exact
 * again (viewers and likes, through count frames and HTTP reads on both gateways) within a stated
 * bound of NATS being back, and no watcher may see a page with fewer viewers than it has.
 *
 * The tests share one cluster and one audience and run in order; each leaves it exact.
 */
import { DEFAULT_RECONNECT_TIME_WAIT_MS } from "@livecount/bus";
import { afterAll, beforeAll, expect, onTestFailed, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { CLUSTER_PUBLISHER_KEY, TIMINGS, TestCluster, type ClusterProcess } from "../support/cluster.js";
import {
  Scene,
  expectAllRunning,
  expectReadiness,
  expectReadyAgain,
  readyz,
  sampleReadiness,
} from "../support/cluster_scene.js";
import { Crowd } from "../support/crowd.js";
import { eventually, sleep } from "../support/eventually.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { PublisherHttp } from "../support/publisher_http.js";
import { redisServerAvailable } from "../support/redis_server.js";

const TEST_TIMEOUT_MS = 60_000;
/** Slack for a loaded 2-core machine over any bound derived from the settings. */
const MARGIN_MS = 2000;
/** Until a page is exact when nothing failed. */
const CONVERGE_MS = 10_000;

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - NATS failures under a running cluster",
  () => {
    /**
     * Not a number the docs give: what coming back should take (one reconnect wait of the NATS
     * client, plus the up to 100 ms of jitter nats.js adds, and a settle window of an owner that
     * resyncs its gateways) plus the margin.
     */
    const RECOVERY_MS = DEFAULT_RECONNECT_TIME_WAIT_MS + 100 + TIMINGS.settleMs + MARGIN_MS;
    /** A gateway notices a dead NATS connection at once (the socket closes): it is not ready within this. */
    const NOTICE_DISCONNECT_MS = 1000;
    /**
     * Without heartbeats every process's ring empties after the node lease: a gateway has no
     * counter node to ask, a counter node is alone and cannot hold every partition its ring gives
     * it. Not ready within this.
     */
    const NOTICE_SILENCE_MS = TIMINGS.nodeLeaseMs + 1000;
    /** Past the gateway lease (owners lose every gateway's heartbeats and drop its viewers), and a second of readiness samples past NOTICE_SILENCE_MS. */
    const OUTAGE_MS = NOTICE_SILENCE_MS + 1000;
    /** After a thaw, long enough for the frozen server's queued heartbeats to reach the owners. */
    const KILL_AFTER_THAW_MS = 300;

    let cluster: TestCluster;
    let crowd: Crowd;
    let scene: Scene;

    beforeAll(async () => {
      cluster = await TestCluster.start();
      crowd = new Crowd();
      scene = await Scene.seat(cluster, crowd, "nats", 4);
    }, 60_000);

    afterAll(async () => {
      await crowd?.close();
      await cluster?.stop();
    });

    const processes = (): ClusterProcess[] => [...cluster.counters, ...cluster.gateways];

    /**
     * A NATS outage is every node's silence: none finds proof in Redis that the bus carries for the
     * others, so none hands its partitions over (BusIsolation).
     */
    async function expectNoHandOver(): Promise<void> {
      for (const c of cluster.counters)
        expect(await c.metric("livecount_counter_bus_isolations_total"), `${c.nodeId} handed over`).toBe(0);
    }

    function logsOnFailure(): void {
      onTestFailed(() => {
        console.error(`\n----- logs of every process -----\n${cluster.logs()}\n`);
      });
    }

    test(
      "cluster - NATS restarted in place (SIGTERM, then back on its port): no page dips, nothing crashes, and every page is exact and every process ready within the recovery bound",
      async () => {
        logsOnFailure();
        await scene.expectExact();
        const readiness = sampleReadiness(cluster);
        const since = Date.now();
        await cluster.nats.restart();
        const backAt = Date.now();
        const recoveredAt = await scene.recovered(TIMINGS.gatewayLeaseMs, RECOVERY_MS + CONVERGE_MS);
        const samples = await readiness.stop();
        const report = {
          natsDownMs: backAt - since,
          exactAfterBackMs: recoveredAt - backAt,
          notReadySamples: samples.filter((s) => [...s.status.values()].some((v) => v !== 200)).length,
        };
        console.info(`cluster NATS restart: ${JSON.stringify(report)}`);
        expect(scene.deepestDip(since), "a watcher saw fewer viewers than the truth").toBeUndefined();
        expect(recoveredAt - backAt).toBeLessThanOrEqual(RECOVERY_MS);
        expectReadyAgain(samples, processes(), backAt, RECOVERY_MS, "after NATS came back");
        expectAllRunning(cluster);
        expect(crowd.unexpectedCloses()).toEqual([]);
      },
      TEST_TIMEOUT_MS,
    );

    test(
      "cluster - NATS down past the gateway lease: every process says not ready while it is down, nothing crashes, and every page is exact within the recovery bound of its return",
      async () => {
        logsOnFailure();
        await scene.expectExact();
        const readiness = sampleReadiness(cluster);
        const downAt = Date.now();
        await cluster.nats.kill();
        await sleep(OUTAGE_MS);
        const restartAt = Date.now();
        await cluster.nats.restart();
        const backAt = Date.now();
        const recoveredAt = await scene.recovered(TIMINGS.gatewayLeaseMs, RECOVERY_MS + CONVERGE_MS);
        const samples = await readiness.stop();
        console.info(
          `cluster NATS down ${restartAt - downAt} ms: ${JSON.stringify({
            exactAfterBackMs: recoveredAt - backAt,
            deepestDip: scene.deepestDip(downAt),
          })}`,
        );
        // The owners heard nothing either, not even NATS's answers: no gateway's viewers were
        // dropped for a silence that was the bus's, so no page showed fewer viewers after it.
        expect(scene.deepestDip(downAt), "a watcher saw fewer viewers than the truth").toBeUndefined();
        for (const g of cluster.gateways)
          expectReadiness(samples, g, 503, downAt + NOTICE_DISCONNECT_MS, restartAt, "while NATS was down");
        for (const c of cluster.counters)
          expectReadiness(samples, c, 503, downAt + NOTICE_SILENCE_MS, restartAt, "while NATS was down");
        expectReadyAgain(samples, processes(), backAt, RECOVERY_MS, "after NATS came back");
        expect(recoveredAt - backAt).toBeLessThanOrEqual(RECOVERY_MS);
        await expectNoHandOver();
        expectAllRunning(cluster);
        expect(crowd.unexpectedCloses()).toEqual([]);
      },
      TEST_TIMEOUT_MS,
    );

    test(
      "cluster - NATS frozen (SIGSTOP) past the gateway lease: readiness drops within the node lease, nothing crashes, and every page is exact within the recovery bound of SIGCONT",
      async () => {
        logsOnFailure();
        await scene.expectExact();
        const readiness = sampleReadiness(cluster);
        const frozenAt = Date.now();
        await cluster.nats.pause();
        await sleep(OUTAGE_MS);
        const thawAt = Date.now();
        await cluster.nats.resume();
        const backAt = Date.now();
        const recoveredAt = await scene.recovered(TIMINGS.gatewayLeaseMs, RECOVERY_MS + CONVERGE_MS);
        const samples = await readiness.stop();
        console.info(
          `cluster NATS frozen ${thawAt - frozenAt} ms: ${JSON.stringify({
            exactAfterThawMs: recoveredAt - backAt,
            deepestDip: scene.deepestDip(frozenAt),
          })}`,
        );
        expect(scene.deepestDip(frozenAt), "a watcher saw fewer viewers than the truth").toBeUndefined();
        // Frozen, the server keeps every connection open: nobody sees a disconnect, only silence.
        for (const p of processes())
          expectReadiness(samples, p, 503, frozenAt + NOTICE_SILENCE_MS, thawAt, "while NATS was frozen");
        expectReadyAgain(samples, processes(), backAt, RECOVERY_MS, "after NATS was thawed");
        expect(recoveredAt - backAt).toBeLessThanOrEqual(RECOVERY_MS);
        await expectNoHandOver();
        expectAllRunning(cluster);
        expect(crowd.unexpectedCloses()).toEqual([]);
      },
      TEST_TIMEOUT_MS,
    );

    // BRIEF.md invariant 8: nothing hangs into a 504. A gateway knows when its NATS connection is
    // down (its own /readyz says 503); a read sent to it meanwhile is refused at once as retryable,
    // not handed to the disconnected client to wait out the request timeout.
    test(
      "cluster - a read sent while a gateway's NATS connection is down is refused at once with a retryable 503, never left to time out into a 504",
      async () => {
        await scene.expectExact();
        const [gateway] = cluster.gateways as [ClusterProcess];
        const http = new PublisherHttp(gateway.url, CLUSTER_PUBLISHER_KEY);
        await cluster.nats.kill();
        let answers: Array<{ status: number; retryAfter: boolean; ms: number }> = [];
        try {
          await eventually(
            async () => {
              if ((await readyz(gateway)) !== 503) throw new Error(`${gateway.nodeId} still ready`);
            },
            { timeoutMs: NOTICE_DISCONNECT_MS, intervalMs: 10, message: "the gateway noticed" },
          );
          answers = await Promise.all(
            scene.pages.map(async (page) => {
              const sentAt = Date.now();
              const res = await http.request("GET", `/v1/pages/${encodeURIComponent(page)}/counter`);
              const retryAfter = res.headers.get("retry-after") !== null;
              return { status: res.status, retryAfter, ms: Date.now() - sentAt };
            }),
          );
        } finally {
          await cluster.nats.restart();
        }
        console.info(`cluster reads while NATS is down: ${JSON.stringify(answers)}`);
        await scene.recovered(0, RECOVERY_MS + CONVERGE_MS);
        for (const a of answers) {
          expect({ status: a.status, retryAfter: a.retryAfter }).toEqual({ status: 503, retryAfter: true });
          expect(a.ms, "a refusal comes at once").toBeLessThan(NOTICE_DISCONNECT_MS);
        }
      },
      TEST_TIMEOUT_MS,
    );

    // The other side of not counting a silent bus against the gateways: a gateway that dies as NATS
    // comes back must still stop counting within its lease, not the outage later (ghost viewers).
    // Last: it kills a gateway of the shared cluster.
    test(
      "cluster - a gateway killed right after NATS thaws stops counting within its lease, not the outage later",
      async () => {
        logsOnFailure();
        await scene.expectExact();
        const [keeper, victim] = cluster.gateways as [ClusterProcess, ClusterProcess];
        await cluster.nats.pause();
        await sleep(OUTAGE_MS);
        await cluster.nats.resume();
        // The victim's heartbeats, held in the frozen server, reach the owners as it resumes.
        await sleep(KILL_AFTER_THAW_MS);
        const killedAt = Date.now();
        await victim.kill();
        crowd.gatewayGone(victim.wsUrl);
        const watcher = scene.watchers[cluster.gateways.indexOf(keeper)]!;
        for (const page of scene.pages)
          await watcher.waitForViewers(page, crowd.expected(page), TIMINGS.gatewayLeaseMs + 2 * MARGIN_MS);
        const droppedMs = Date.now() - killedAt;
        console.info(
          `cluster gateway killed after a NATS freeze: ${JSON.stringify({ droppedMs, OUTAGE_MS })}`,
        );
        expect(droppedMs).toBeLessThanOrEqual(TIMINGS.gatewayLeaseMs + MARGIN_MS);
        expect(scene.deepestDip(killedAt), "a watcher saw fewer viewers than the truth").toBeUndefined();
      },
      TEST_TIMEOUT_MS,
    );
  },
);
