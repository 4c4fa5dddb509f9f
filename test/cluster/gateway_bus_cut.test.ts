/**
 * A gateway cut off the bus (its link to NATS reset and refused) past its lease, while the rest of
 * the DC goes on: the owners stop counting its viewers (they cannot tell it from a dead gateway),
 * and the other gateway's watchers show the DC without them; the gateway cut off says it is not
 * ready, keeps its sockets open, and its watchers miss what changes meanwhile. Once the link heals,
 * it gives its viewers back to the owners (a leave made during the cut included) and takes fresh
 * snapshots of its pages: every page is exact at every watcher and in every read.
 */
import { afterAll, beforeAll, expect, onTestFailed, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { CLUSTER_PUBLISHER_KEY, TIMINGS, TestCluster, type ClusterProcess } from "../support/cluster.js";
import { Scene, expectAllRunning, readyz } from "../support/cluster_scene.js";
import { Crowd } from "../support/crowd.js";
import { eventually, sleep } from "../support/eventually.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { PublisherHttp } from "../support/publisher_http.js";
import { redisServerAvailable } from "../support/redis_server.js";

const TEST_TIMEOUT_MS = 60_000;
/** Slack for a loaded 2-core machine over any bound derived from the settings. */
const MARGIN_MS = 2000;
const PAGES = 6;
const QUIET_PAGE = "gw-cut-quiet";
/** The owners forget the gateway cut off after its lease; its viewers linger for the grace window. */
const DROPPED_MS = TIMINGS.gatewayLeaseMs + TIMINGS.graceMs + 2 * MARGIN_MS;
/** A cut shorter than the node lease: nobody forgets anybody, so only the bus's reconnect tells. */
const MOMENT_MS = TIMINGS.nodeLeaseMs / 3;
/** From the heal: nats.js reconnects (every reconnect wait), resyncs presence, re-takes snapshots. */
const BACK_MS = 10_000;

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - a gateway cut off the bus past its lease",
  () => {
    let cluster: TestCluster;
    let crowd: Crowd;
    let scene: Scene;

    beforeAll(async () => {
      cluster = await TestCluster.start({ natsLinks: "all" });
      crowd = new Crowd();
      scene = await Scene.seat(cluster, crowd, "gw-cut", PAGES);
    }, 60_000);

    afterAll(async () => {
      await crowd?.close();
      await cluster?.stop();
    });

    test(
      "cluster - a gateway cut off the bus past its lease: its viewers drop out while it lasts, and once it heals every page is exact everywhere, with what changed meanwhile on both sides",
      async () => {
        onTestFailed(() => console.error(`\n----- logs -----\n${cluster.logs()}\n`));
        const [gateway1, gateway2] = cluster.gateways as [ClusterProcess, ClusterProcess];
        const [watcher1, watcher2] = scene.watchers;
        const link = cluster.natsLinkOf(gateway2);
        const reconnects = await gateway2.metric("livecount_gateway_bus_reconnects_total");
        // A viewer on the gateway to be cut off, who leaves during the cut: only it knows, until the heal.
        const leaver = await crowd.join(gateway2.wsUrl, scene.pages[2]!, "gw-cut-leaver");
        await eventually(() => scene.expectExact(), { timeoutMs: BACK_MS, message: "exact with the leaver" });
        const likesSeen = watcher2!.lastCount(scene.pages[0]!)!.counters.likes;
        // A page with no viewer on the gateway to be cut off, watched there: its heal changes nothing
        // on it, so only a fresh snapshot brings what changed meanwhile.
        await crowd.join(gateway1.wsUrl, QUIET_PAGE, "gw-cut-quiet-viewer");
        const quietWatcher = await crowd.watcher(gateway2.wsUrl, [QUIET_PAGE]);
        const cutAt = Date.now();
        link.cut();
        await leaver.terminate();
        crowd.left(leaver);

        // Meanwhile, on the gateway that still hears the bus: a like on every page and a new viewer.
        const http = new PublisherHttp(gateway1.url, CLUSTER_PUBLISHER_KEY);
        for (const page of scene.pages) {
          expect((await http.change(page, "likes", 1, `gw-cut-during:${page}`)).status).toBe(200);
          scene.likes.set(page, scene.likes.get(page)! + 1);
        }
        await crowd.join(gateway1.wsUrl, scene.pages[0]!, "joined-during-the-cut");
        expect((await http.change(QUIET_PAGE, "likes", 3, "gw-cut-during:quiet")).status).toBe(200);

        // The owners drop the gateway cut off: the other gateway's watcher and reads show the DC
        // without its viewers, and it says it is not ready.
        const droppedMs = await eventually(
          async () => {
            expect(await readyz(gateway2), `${gateway2.nodeId} /readyz while cut off`).toBe(503);
            for (const page of scene.pages) {
              const want = crowd.expected(page, gateway2.wsUrl);
              const frame = watcher1!.lastCount(page);
              expect(frame?.viewers, `${page} at ${gateway1.nodeId}'s watcher`).toBe(want);
              expect(frame?.counters.likes, `${page} likes`).toBe(scene.likes.get(page));
              const read = await http.totals(page);
              expect(read[0]?.viewers, `${page} read through ${gateway1.nodeId}`).toBe(want);
            }
            return Date.now() - cutAt;
          },
          { timeoutMs: DROPPED_MS, intervalMs: 100, message: "the cut gateway's viewers dropped" },
        );
        // Its own watchers heard nothing of what changed meanwhile.
        expect(watcher2!.lastCount(scene.pages[0]!)!.counters.likes).toBe(likesSeen);
        expect(quietWatcher.lastCount(QUIET_PAGE)!.counters.likes ?? 0).toBe(0);

        const healedAt = Date.now();
        link.heal();
        const backMs = await eventually(
          async () => {
            await scene.expectExact();
            expect(quietWatcher.lastCount(QUIET_PAGE)).toMatchObject({ viewers: 1, counters: { likes: 3 } });
            expect(await readyz(gateway2), `${gateway2.nodeId} /readyz after the heal`).toBe(200);
            return Date.now() - healedAt;
          },
          { timeoutMs: BACK_MS, intervalMs: 50, message: "every page exact everywhere after the heal" },
        );
        console.info(`cluster gateway cut off the bus: ${JSON.stringify({ droppedMs, backMs })}`);
        expect(await gateway2.metric("livecount_gateway_bus_reconnects_total")).toBeGreaterThan(reconnects);
        // And it stays so once every lease and grace window since has run out.
        await sleep(TIMINGS.gatewayLeaseMs + MARGIN_MS);
        await scene.expectExact();
        expectAllRunning(cluster);
        expect(crowd.unexpectedCloses()).toEqual([]);
      },
      TEST_TIMEOUT_MS,
    );

    test(
      "cluster - a gateway cut off the bus for a moment, within its lease: once it reconnects its watchers get what changed meanwhile, on a page whose heal changes nothing",
      async () => {
        onTestFailed(() => console.error(`\n----- logs -----\n${cluster.logs()}\n`));
        const [gateway1, gateway2] = cluster.gateways as [ClusterProcess, ClusterProcess];
        const page = `${QUIET_PAGE}-moment`;
        await crowd.join(gateway1.wsUrl, page, "gw-cut-moment-viewer");
        const quietWatcher = await crowd.watcher(gateway2.wsUrl, [page]);
        const reconnects = await gateway2.metric("livecount_gateway_bus_reconnects_total");
        const link = cluster.natsLinkOf(gateway2);
        link.cut();
        const http = new PublisherHttp(gateway1.url, CLUSTER_PUBLISHER_KEY);
        expect((await http.change(page, "likes", 2, "gw-cut-moment")).status).toBe(200);
        await sleep(MOMENT_MS);
        link.heal();
        await eventually(
          async () => {
            expect(await gateway2.metric("livecount_gateway_bus_reconnects_total")).toBeGreaterThan(
              reconnects,
            );
            expect(quietWatcher.lastCount(page)).toMatchObject({ viewers: 1, counters: { likes: 2 } });
            await scene.expectExact();
          },
          { timeoutMs: BACK_MS, intervalMs: 50, message: "exact at the watcher of the gateway cut off" },
        );
        expectAllRunning(cluster);
        expect(crowd.unexpectedCloses()).toEqual([]);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
