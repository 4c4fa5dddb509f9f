/**
 * Presence a NATS server passes on late (it froze holding it, then thawed) from a gateway
 * incarnation its owner already let go, with real processes (nats-server, redis-server, a counter
 * node and gateways from the built output). The test plays the thawing server: it captures the
 * incarnation's heartbeats while it runs, kills and restarts its gateway, then sends what the
 * dead process could have left behind, on the subjects it used. None of it counts.
 */
import { NatsBus, gatewaysSubject, nodeSubject } from "@livecount/bus";
import {
  decodeMessage,
  decodeNodeReply,
  encodeMessage,
  holdCode,
  type CountFrame,
  type GatewayHeartbeat,
} from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { setTimeout as sleep } from "node:timers/promises";
import { expect, onTestFinished, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { TIMINGS, type ClusterProcess } from "../support/cluster.js";
import { startCluster } from "../support/fault_scenes.js";
import { Crowd } from "../support/crowd.js";
import { eventually } from "../support/eventually.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { redisServerAvailable } from "../support/redis_server.js";

const TEST_TIMEOUT_MS = 60_000;
const DC = "dc1";
/** How long the test watches for late presence to count: many coalescing windows and probes. */
const WATCH_MS = 3000;

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - late presence",
  () => {
    test(
      "cluster - presence and heartbeats passed on late from a gateway incarnation its owner released never count again",
      async () => {
        const graceMs = 1000;
        // A lease far longer than the watch: before the fix, what came late counted for all of it.
        const gatewayLeaseMs = 15_000;
        const cluster = await startCluster({
          counters: 1,
          gateways: 2,
          env: { LIVECOUNT_GRACE_MS: String(graceMs), LIVECOUNT_GATEWAY_LEASE_MS: String(gatewayLeaseMs) },
        });
        const bus = await NatsBus.connect({ servers: cluster.nats.url });
        onTestFinished(() => bus.close());
        const [keeper, victim] = cluster.gateways as [ClusterProcess, ClusterProcess];
        const [counter] = cluster.counters as [ClusterProcess];
        const beats: GatewayHeartbeat[] = [];
        const beatsSub = bus.subscribe(gatewaysSubject(DC), (data) => {
          const msg = decodeMessage(data);
          if (msg.type === "gateway" && msg.node === victim.nodeId && msg.state === "up") beats.push(msg);
        });
        onTestFinished(() => beatsSub.unsubscribe());

        const crowd = new Crowd();
        onTestFinished(() => crowd.close());
        const page = "late-presence";
        await crowd.seat(victim.wsUrl, page, "old", 2);
        const watcher = await crowd.watcher(keeper.wsUrl, [page]);
        const last = (): CountFrame | undefined => watcher.lastCount(page);
        await eventually(() => expect(last()?.viewers).toBe(2), { timeoutMs: 10_000 });
        const dead = await eventually(() => beats.at(-1) ?? Promise.reject(new Error("no heartbeat yet")), {
          timeoutMs: gatewayLeaseMs,
        });

        // Restarted: the owner finds the old incarnation gone and releases it.
        await victim.kill();
        crowd.gatewayGone(victim.wsUrl);
        await victim.start();
        await crowd.join(victim.wsUrl, page, "new-0");
        await eventually(() => expect([last()?.viewers, last()?.connections]).toEqual([1, 1]), {
          timeoutMs: 10_000,
          intervalMs: 20,
        });

        // The thaw: the dead incarnation's heartbeat, a batch and a sync it sent before it died.
        const framesBefore = watcher.received.length;
        const partition = partitionOf(page, TIMINGS.partitions);
        bus.publish(gatewaysSubject(DC), encodeMessage(dead));
        const replies = [];
        for (const request of [
          {
            type: "presence_pages" as const,
            gateway: dead.gateway,
            partition,
            pages: [[page, ["ghost-1", holdCode(1, true)]]] as Array<[string, Array<string | number>]>,
          },
          {
            type: "presence_sync" as const,
            gateway: dead.gateway,
            partition,
            pages: { [page]: ["ghost-2"] },
          },
        ]) {
          const raw = await bus.request(nodeSubject(DC, counter.nodeId), encodeMessage(request), {
            timeoutMs: 3000,
          });
          replies.push(decodeNodeReply(raw));
        }
        await sleep(WATCH_MS);
        const frames = watcher.received
          .slice(framesBefore)
          .map((r) => r.frame)
          .filter((f): f is CountFrame => f.type === "count" && f.page === page);
        console.info(`cluster late presence: ${JSON.stringify({ replies, frames: frames.length })}`);
        for (const f of frames) expect([f.viewers, f.connections]).toEqual([1, 1]);
        expect([last()?.viewers, last()?.connections]).toEqual([1, 1]);
        expect(await counter.metric("livecount_counter_presence_stale_total")).toBeGreaterThanOrEqual(2);
        expect(crowd.expected(page)).toBe(1);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
