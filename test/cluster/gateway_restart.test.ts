/**
 * A gateway killed (SIGKILL) and restarted under the same LIVECOUNT_NODE_ID, with real processes
 * (nats-server, redis-server, a counter node and gateways from the built output): the restarted
 * process's first heartbeat makes the owners ask for the previous incarnation, which no longer
 * answers (its NATS connection died with it), so what it held is released at once, with the grace
 * window, instead of counting until it has missed a heartbeat (1.5 intervals of silence) or its
 * lease lapses. Viewers who come back within the grace never
 * dip; the dead process's sockets stop counting as connections then; viewers who do not come back
 * stop counting after the grace window.
 */
import type { CountFrame } from "@livecount/protocol";
import { expect, onTestFinished, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { TestCluster, type ClusterProcess } from "../support/cluster.js";
import { Crowd } from "../support/crowd.js";
import { eventually } from "../support/eventually.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { redisServerAvailable } from "../support/redis_server.js";

const TEST_TIMEOUT_MS = 60_000;
/** Slack for a loaded 2-core machine over any bound derived from the settings. */
const MARGIN_MS = 2000;

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - gateway restart",
  () => {
    test(
      "cluster - a gateway killed and restarted under the same node id releases its previous incarnation as soon as it starts: viewers who reconnect never dip, the dead sockets stop counting as connections, the others drop after the grace window, long before a missed heartbeat",
      async () => {
        const graceMs = 2000;
        /**
         * Heartbeats every 20 s: waiting for a missed one (1.5 intervals, 30 s after the last beat)
         * would release the old incarnation 10 s after the kill at the earliest.
         */
        const gatewayLeaseMs = 60_000;
        const silenceReleaseMs = (1.5 * gatewayLeaseMs) / 3 - gatewayLeaseMs / 3;
        const cluster = await TestCluster.start({
          counters: 1,
          gateways: 2,
          env: { LIVECOUNT_GRACE_MS: String(graceMs), LIVECOUNT_GATEWAY_LEASE_MS: String(gatewayLeaseMs) },
        });
        onTestFinished(async ({ task }) => {
          const failed = task.result?.state === "fail";
          if (failed) console.error(`\n----- logs (kept in ${cluster.logDir}) -----\n${cluster.logs()}\n`);
          await cluster.stop(failed);
        });
        const crowd = new Crowd();
        onTestFinished(() => crowd.close());
        const [keeper, victim] = cluster.gateways as [ClusterProcess, ClusterProcess];
        const page = "restarted-gateway";
        await crowd.seat(victim.wsUrl, page, "back", 3);
        await crowd.seat(victim.wsUrl, page, "gone", 2);
        // A second tab of one returning viewer: two connections, one viewer.
        await crowd.join(victim.wsUrl, page, "back-0");
        const watcher = await crowd.watcher(keeper.wsUrl, [page]);
        const last = (): CountFrame | undefined => watcher.lastCount(page);
        await eventually(() => expect([last()?.viewers, last()?.connections]).toEqual([5, 6]), {
          timeoutMs: 10_000,
        });

        const framesBefore = watcher.received.length;
        await victim.kill();
        crowd.gatewayGone(victim.wsUrl);
        const restartedAt = Date.now();
        await victim.start();
        const readyMs = Date.now() - restartedAt;
        for (let i = 0; i < 3; i++) await crowd.join(victim.wsUrl, page, `back-${i}`);

        // Exact: the three who came back, one socket each, the dead sockets no longer counted.
        await eventually(() => expect([last()?.viewers, last()?.connections]).toEqual([3, 3]), {
          timeoutMs: gatewayLeaseMs,
          intervalMs: 20,
        });
        const exactMs = Date.now() - restartedAt;
        console.info(
          `cluster gateway restart: ${JSON.stringify({ readyMs, exactMs, graceMs, gatewayLeaseMs })}`,
        );
        const received = watcher.received
          .slice(framesBefore)
          .filter(
            (r): r is typeof r & { frame: CountFrame } => r.frame.type === "count" && r.frame.page === page,
          );
        const frames = received.map((r) => r.frame);
        // Released once the restarted process was heard, not after a missed heartbeat: the dead
        // sockets stopped counting by the time it was ready, give or take a coalescing window.
        const releasedMs = received.find((r) => (r.frame.connections ?? Infinity) <= 3)!.at - restartedAt;
        expect(releasedMs).toBeLessThanOrEqual(readyMs + MARGIN_MS);
        expect(releasedMs).toBeLessThan(silenceReleaseMs);
        // The lingering viewers drop one grace window after that.
        expect(exactMs).toBeLessThanOrEqual(readyMs + graceMs + 2 * MARGIN_MS);
        // Never below the viewers who came back, never above those who were there; until the old
        // incarnation is released its sockets count beside the new ones (6 + 3).
        for (const f of frames) {
          expect(f.viewers).toBeGreaterThanOrEqual(3);
          expect(f.viewers).toBeLessThanOrEqual(5);
          expect(f.connections).toBeLessThanOrEqual(9);
        }
        // Released with the grace window (not dropped at the lease's end, which ends viewers at
        // once): the dead sockets stopped counting while the two who left still lingered.
        expect(frames.some((f) => f.viewers === 5 && f.connections === 3)).toBe(true);
        // The two who did not come back lingered, then dropped together.
        const viewers = frames.map((f) => f.viewers).filter((v, i, all) => i === 0 || v !== all[i - 1]);
        expect(viewers).toEqual([5, 3]);
        expect(crowd.expected(page)).toBe(3);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
