/**
 * One process per gateway node id, with real processes. A second gateway started under a live one's
 * LIVECOUNT_NODE_ID (a copied config) must not start: before, both ran, the owners warned at every
 * heartbeat, and whichever was slow to beat lost its viewers to the other's supersession. One that
 * replaced a frozen gateway keeps the id when the frozen one thaws; the thawed one stops.
 */
import { expect, onTestFinished, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { readCounter } from "../support/counter_reads.js";
import type { ClusterProcess } from "../support/cluster.js";
import { TIMINGS } from "../support/cluster.js";
import { startCluster } from "../support/fault_scenes.js";
import { eventually, sleep } from "../support/eventually.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { redisServerAvailable } from "../support/redis_server.js";
import { exitedWithin, twinOf } from "../support/twins.js";
import { TestClient } from "../support/ws_client.js";

const TEST_TIMEOUT_MS = 60_000;
const PAGES = Array.from({ length: 4 }, (_, i) => `gateway-twins-${i}`);
/** A process that must exit has this long: a gateway heartbeat interval, its shutdown, and then some. */
const EXIT_WITHIN_MS = 5000;

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - two processes under one gateway node id",
  () => {
    test(
      "cluster - a second gateway under a live one's id refuses to start; one that replaced a frozen gateway keeps the id when it thaws",
      async () => {
        const cluster = await startCluster({ counters: 1, gateways: 1 });
        const [first] = cluster.gateways as [ClusterProcess];
        const twin = await twinOf(first, cluster.logDir);
        const clients: TestClient[] = [];
        onTestFinished(async () => {
          await Promise.all(clients.map((c) => c.terminate()));
        });
        const seat = async (gateway: ClusterProcess): Promise<void> => {
          for (let i = 0; i < 2; i++) {
            const client = await TestClient.connect(gateway.wsUrl);
            clients.push(client);
            for (const page of PAGES) client.join(page);
          }
        };
        const exact = async (gateway: ClusterProcess): Promise<void> =>
          eventually(async () => {
            for (const page of PAGES)
              expect({ page, viewers: (await readCounter(gateway, page)).viewers }).toEqual({
                page,
                viewers: 2,
              });
          });
        await seat(first);
        await exact(first);

        // A second live process under the id: refused before it beats or listens; the first is
        // left alone, and no owner hears of a second incarnation.
        twin.spawn();
        expect(await exitedWithin(twin, EXIT_WITHIN_MS)).toEqual({ code: 1, signal: null });
        expect(twin.log()).toContain(`gateway node id ${first.nodeId} is in use in dc1 by incarnation`);
        await sleep(TIMINGS.gatewayLeaseMs);
        await exact(first);
        const [counter] = cluster.counters as [ClusterProcess];
        expect(counter.log()).not.toContain("two live gateways share a node id");

        // The first one frozen: a replacement asks for a gateway lease, then takes the id; its own
        // viewers count, the frozen one's go once it misses its lease.
        first.pause();
        const frozenAt = Date.now();
        twin.spawn();
        await twin.waitReady();
        expect(Date.now() - frozenAt).toBeGreaterThanOrEqual(TIMINGS.gatewayLeaseMs - 200);
        expect(twin.log()).toContain("has not answered for a gateway lease; taking its place");
        clients.splice(0).forEach((c) => void c.terminate());
        await seat(twin);
        await exact(twin);

        // Thawed, the first one hears its successor beat under its id and stops; the successor
        // keeps serving and its count stays exact.
        first.resume();
        expect(await exitedWithin(first, EXIT_WITHIN_MS)).toEqual({ code: 1, signal: null });
        expect(first.log()).toContain("a later gateway process runs under this node id (incarnation ");
        await sleep(TIMINGS.gatewayLeaseMs);
        await exact(twin);
        expect(twin.running).toBe(true);
        expect(twin.log()).not.toContain("a later gateway process runs under this node id");
      },
      TEST_TIMEOUT_MS,
    );
  },
);
