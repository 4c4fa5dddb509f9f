/**
 * One process per counter node id, with real processes. A second process started under a live
 * node's LIVECOUNT_NODE_ID (a copied config, a supervisor that did not wait) must not take its
 * partitions; and a process that replaced a frozen one (its supervisor thought it dead) must not
 * lose them to it once it thaws. Without this, the two took each other's leases in turn.
 */
import { expect, onTestFinished, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { readCounter } from "../support/counter_reads.js";
import type { ClusterProcess } from "../support/cluster.js";
import { CLUSTER_PUBLISHER_KEY } from "../support/cluster.js";
import { startCluster } from "../support/fault_scenes.js";
import { eventually } from "../support/eventually.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { PublisherHttp } from "../support/publisher_http.js";
import { redisServerAvailable } from "../support/redis_server.js";
import { exitedWithin, twinOf } from "../support/twins.js";
import { TestClient } from "../support/ws_client.js";

const TEST_TIMEOUT_MS = 60_000;
const PAGES = Array.from({ length: 8 }, (_, i) => `twins-${i}`);
/** A process that must exit has this long: a node heartbeat interval (500 ms here) and then some. */
const EXIT_WITHIN_MS = 5000;

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - two processes under one counter node id",
  () => {
    test(
      "cluster - a second process under a live node's id refuses to start; one that replaced a frozen node stops it when it thaws, and keeps its partitions",
      async () => {
        const cluster = await startCluster({ counters: 2, gateways: 1 });
        const [first] = cluster.counters as [ClusterProcess];
        const [gateway] = cluster.gateways as [ClusterProcess];
        const twin = await twinOf(first, cluster.logDir);
        const clients: TestClient[] = [];
        onTestFinished(async () => {
          await Promise.all(clients.map((c) => c.terminate()));
        });
        const http = new PublisherHttp(gateway.url, CLUSTER_PUBLISHER_KEY);
        for (let i = 0; i < 2; i++) {
          const client = await TestClient.connect(gateway.wsUrl);
          clients.push(client);
          for (const page of PAGES) client.join(page);
        }
        let likes = 0;
        const like = async (): Promise<void> => {
          likes++;
          for (const page of PAGES) {
            const res = await http.change(page, "likes", 1, `${page}-${likes}`);
            expect(res.status, JSON.stringify(res.body)).toBe(200);
          }
        };
        const exact = async (): Promise<void> =>
          eventually(async () => {
            for (const page of PAGES) {
              const read = await readCounter(gateway, page);
              expect({ page, viewers: read.viewers, likes: read.counters.likes }).toEqual({
                page,
                viewers: 2,
                likes,
              });
            }
          });
        await like();
        await exact();
        const owned = await first.metric("livecount_counter_partitions_owned");
        expect(owned).toBeGreaterThan(0);

        // A second live process under the id: refused at its start, and the first is left alone.
        twin.spawn();
        expect(await exitedWithin(twin, EXIT_WITHIN_MS)).toEqual({ code: 1, signal: null });
        expect(twin.log()).toContain(`LIVECOUNT_NODE_ID ${first.nodeId} is in use by a live counter node`);
        expect(await first.metric("livecount_counter_partitions_owned")).toBe(owned);
        expect(first.log()).not.toContain("partition lease lost");

        // The first one frozen: a replacement under its id takes its place and its partitions.
        first.pause();
        twin.spawn();
        await twin.waitReady();
        await like();
        await exact();

        // Thawed, the first one hears its successor and exits; the successor keeps every partition.
        first.resume();
        expect(await exitedWithin(first, EXIT_WITHIN_MS)).toEqual({ code: 1, signal: null });
        expect(first.log()).toContain("a later process took this node id; stopping without handing over");
        await like();
        await exact();
        expect(await twin.metric("livecount_counter_partitions_owned")).toBe(owned);
        expect(twin.log()).not.toContain("partition lease lost");
        expect(twin.running).toBe(true);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
