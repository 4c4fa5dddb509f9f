/**
 * Start order, with real processes: a counter node and a gateway started while their NATS and Redis
 * are down wait for them instead of exiting, and are ready once they are up, in the same processes
 * (no supervisor needed, as with infra/local). The counter node answers /healthz meanwhile and
 * says it is not ready.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { expect, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { eventually } from "../support/eventually.js";
import { CLUSTER_PUBLISHER_KEY, type ClusterProcess } from "../support/cluster.js";
import { startCluster } from "../support/fault_scenes.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { redisServerAvailable } from "../support/redis_server.js";

const TEST_TIMEOUT_MS = 60_000;
/** Longer than a few of the start's tries (250, 500, 1000 ms, then every 2 s). */
const DOWN_MS = 3000;

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - start order",
  () => {
    test(
      "cluster - a counter node and a gateway started before NATS and Redis wait for them, alive and not ready, and serve once they are up",
      async () => {
        const cluster = await startCluster({ counters: 1, gateways: 1 });
        const [counter] = cluster.counters as [ClusterProcess];
        const [gateway] = cluster.gateways as [ClusterProcess];
        await gateway.terminate();
        await counter.terminate();
        await cluster.nats.kill();
        await cluster.redis.kill();

        counter.spawn();
        gateway.spawn();
        const pids = [counter.pid, gateway.pid];
        await sleep(DOWN_MS);
        expect([counter.running, gateway.running]).toEqual([true, true]);
        expect((await fetch(`${counter.url}/healthz`)).status).toBe(200);
        expect((await fetch(`${counter.url}/readyz`)).status).toBe(503);
        expect(counter.log()).toContain("NATS not reachable yet; waiting for it");
        expect(gateway.log()).toContain("NATS not reachable yet; waiting for it");

        await cluster.nats.restart();
        // NATS first: the node finds it at its next try, and waits for Redis then.
        await eventually(() => expect(counter.log()).toContain("Redis not reachable yet; waiting for it"), {
          timeoutMs: 10_000,
        });
        await cluster.redis.restart();
        await counter.waitReady();
        await gateway.waitReady();
        expect([counter.pid, gateway.pid]).toEqual(pids);
        const res = await fetch(`${gateway.url}/v1/pages/start-order/counter`, {
          method: "PUT",
          headers: {
            authorization: `Bearer ${CLUSTER_PUBLISHER_KEY}`,
            "content-type": "application/json",
            "idempotency-key": "after-start",
          },
          body: JSON.stringify({ action: "increment", counter: "likes" }),
        });
        expect(res.status).toBe(200);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
