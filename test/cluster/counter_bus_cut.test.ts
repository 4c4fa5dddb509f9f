/**
 * One counter node cut off the bus (its link to NATS reset and refused) while it still reaches
 * Redis, for longer than the node lease: every other process forgets it, and it keeps its
 * partitions, whose leases it renews. What it changes meanwhile (grace windows ending) it publishes
 * to nobody. When its link heals it is heard again as if for the first time, and every page it owns
 * must be exact again at the watchers, not only in reads.
 */
import { afterAll, beforeAll, expect, onTestFailed, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { TIMINGS, TestCluster } from "../support/cluster.js";
import { Scene, expectAllRunning } from "../support/cluster_scene.js";
import { Crowd } from "../support/crowd.js";
import { eventually, sleep } from "../support/eventually.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { redisServerAvailable } from "../support/redis_server.js";

const TEST_TIMEOUT_MS = 60_000;
/** Slack for a loaded 2-core machine over any bound derived from the settings. */
const MARGIN_MS = 2000;
/** Enough pages for both counter nodes to own some (the test checks it). */
const PAGES = 8;
/** Long enough for a leave to reach its owner, shorter than the grace window (300 ms): it ends cut off. */
const LEAVE_REACHES_OWNER_MS = 150;
/** Past the node lease: the gateways and the other node forget the node cut off. */
const CUT_MS = TIMINGS.nodeLeaseMs + MARGIN_MS;
/** From the heal: the node reconnects (nats.js retries every reconnect wait), is heard, pages re-read. */
const BACK_MS = 10_000;

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - a counter node cut off the bus past the node lease",
  () => {
    let cluster: TestCluster;
    let crowd: Crowd;
    let scene: Scene;

    beforeAll(async () => {
      cluster = await TestCluster.start({ natsLinks: true });
      crowd = new Crowd();
      scene = await Scene.seat(cluster, crowd, "bus-cut", PAGES);
    }, 60_000);

    afterAll(async () => {
      await crowd?.close();
      await cluster?.stop();
    });

    test(
      "cluster - a counter node forgotten while cut off the bus and heard again: the watchers get what it changed meanwhile",
      async () => {
        onTestFailed(() => console.error(`\n----- logs -----\n${cluster.logs()}\n`));
        const cutPages = scene.pagesOwnedBy("counter-1");
        expect(cutPages.length, "pages owned by the node cut off").toBeGreaterThan(0);
        expect(cutPages.length, "pages owned by the other").toBeLessThan(scene.pages.length);
        // One more viewer per page, who leaves just before the cut: the node cut off ends their
        // grace windows while it is, and publishes the counts without them to nobody.
        const gateway2 = cluster.gateways[1]!;
        const leavers = await Promise.all(
          scene.pages.map((page) => crowd.join(gateway2.wsUrl, page, `${page}-leaver`)),
        );
        await eventually(() => scene.expectExact(), {
          timeoutMs: BACK_MS,
          message: "exact with the leavers",
        });
        for (const leaver of leavers) {
          await leaver.terminate();
          crowd.left(leaver);
        }
        await sleep(LEAVE_REACHES_OWNER_MS);
        const counter1 = cluster.counters[0]!;
        const link = cluster.natsLinkOf(counter1);
        link.cut();
        await sleep(CUT_MS);
        // Forgotten: the gateways' ring is the other node alone.
        for (const g of cluster.gateways)
          expect(await g.metric("livecount_gateway_counter_nodes"), `${g.nodeId}'s ring`).toBe(1);
        // Its pages' watchers still show the leavers: their leaves went nowhere.
        expect(() => scene.expectFramesExact()).toThrow();
        const healedAt = Date.now();
        link.heal();
        const backMs = await eventually(
          () => {
            scene.expectFramesExact();
            return Date.now() - healedAt;
          },
          { timeoutMs: BACK_MS, intervalMs: 50, message: "every watcher exact after the heal" },
        );
        console.info(`cluster counter node cut off the bus: ${JSON.stringify({ backMs })}`);
        await scene.expectExact();
        // And it stays so once every lease and grace window since has run out.
        await sleep(TIMINGS.gatewayLeaseMs + MARGIN_MS);
        await scene.expectExact();
        expectAllRunning(cluster);
        expect(crowd.unexpectedCloses()).toEqual([]);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
