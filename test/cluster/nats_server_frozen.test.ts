/**
 * One NATS server of a data center's NATS cluster frozen (SIGSTOP) while the others run: the
 * processes connected to it hear nothing, the rest of the DC goes on. A counter node or gateway that
 * hears nothing through its server moves to another (docs/architecture.md, "Recovery and known
 * gaps"), and resyncs there, before the owners that still hear their own server drop its viewers.
 *
 * Two nats-servers joined by routes; counter-1 and gateway-1 are given the first server's URL only,
 * counter-2 and gateway-2 the second's (each learns the other server from the cluster's gossip, as
 * a client given one address of a cluster does). The first server is frozen past the gateway and
 * node leases.
 */
import { afterAll, beforeAll, expect, onTestFailed, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { TestCluster, type ClusterProcess } from "../support/cluster.js";
import { Scene, expectAllRunning, readyz } from "../support/cluster_scene.js";
import { Crowd } from "../support/crowd.js";
import { eventually, sleep } from "../support/eventually.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { redisServerAvailable } from "../support/redis_server.js";

const TEST_TIMEOUT_MS = 90_000;
/** Slack for a loaded 2-core machine over any bound derived from the settings. */
const MARGIN_MS = 2000;
const CONVERGE_MS = 10_000;
/**
 * Leases as long as a deployment's (README defaults: gateway 10 s, node 6 s) scaled down so the test
 * waits less; the DC heartbeat (the round trips that notice the silence) is the default's.
 */
const LEASES = { gatewayLeaseMs: 5000, nodeLeaseMs: 4000, partitionLeaseMs: 5000 } as const;
/** Enough pages for both counter nodes to own some (the test checks it). */
const PAGES = 8;
/** Long enough for a leave to reach its owner, shorter than the grace window (300 ms): it ends frozen. */
const LEAVE_REACHES_OWNER_MS = 150;
/** Before the frozen server's processes move (about a second): their presence waits in it. */
const GHOST_JOINS_AFTER_MS = 300;
/** Past both leases: without the move, the owners on the other server drop the frozen side's viewers. */
const FROZEN_MS = LEASES.gatewayLeaseMs + 3000;

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - one NATS server of the DC's NATS cluster frozen",
  () => {
    let cluster: TestCluster;
    let crowd: Crowd;
    let scene: Scene;

    beforeAll(async () => {
      cluster = await TestCluster.start({
        natsServers: 2,
        env: {
          LIVECOUNT_GATEWAY_LEASE_MS: String(LEASES.gatewayLeaseMs),
          LIVECOUNT_NODE_LEASE_MS: String(LEASES.nodeLeaseMs),
          LIVECOUNT_PARTITION_LEASE_MS: String(LEASES.partitionLeaseMs),
        },
      });
      crowd = new Crowd();
      scene = await Scene.seat(cluster, crowd, "frozen-server", PAGES);
    }, 60_000);

    afterAll(async () => {
      await crowd?.close();
      await cluster?.stop();
    });

    test(
      "cluster - the processes of a frozen NATS server move to another: no watcher sees a page dip, every process is ready again and every page exact while it is still frozen",
      async () => {
        onTestFailed(() => console.error(`\n----- logs -----\n${cluster.logs()}\n`));
        await scene.expectExact();
        expect(
          scene.pagesOwnedBy("counter-1").length,
          "pages owned on the frozen server's node",
        ).toBeGreaterThan(0);
        expect(scene.pagesOwnedBy("counter-2").length, "pages owned on the other").toBeGreaterThan(0);
        // One more viewer per page on the second server's gateway, who leaves just before the
        // freeze: the owners on the frozen server end their grace windows during it, and publish
        // what they counted then to a server that never passes it on.
        const gateway2 = cluster.gateways[1]!;
        const leavers = await Promise.all(
          scene.pages.map((page) => crowd.join(gateway2.wsUrl, page, `${page}-leaver`)),
        );
        await eventually(() => scene.expectExact(), {
          timeoutMs: CONVERGE_MS,
          message: "exact with the leavers",
        });
        for (const leaver of leavers) {
          await leaver.terminate();
          crowd.left(leaver);
        }
        await sleep(LEAVE_REACHES_OWNER_MS);
        const [frozen] = cluster.natsServers;
        const frozenAt = Date.now();
        await frozen!.pause();
        try {
          // A viewer per page of the running server's counter node joins through the frozen
          // server's gateway before it moves: what the gateway sends of them waits in the frozen
          // server. They leave once it moved; when the server thaws it passes the joins on, older
          // than the gateway's resync since, and no owner may count them again. (Not on the frozen
          // server's node's pages: a change there would publish them anew, hiding the lost updates
          // of the leavers.)
          await sleep(GHOST_JOINS_AFTER_MS);
          const gateway1 = cluster.gateways[0]!;
          const ghosts = [];
          for (const page of scene.pagesOwnedBy("counter-2"))
            ghosts.push(await crowd.join(gateway1.wsUrl, page, `${page}-ghost`));
          // Every process, those of the frozen server included, serves again before it thaws.
          const processes: ClusterProcess[] = [...cluster.counters, ...cluster.gateways];
          const movedMs = await eventually(
            async () => {
              for (const p of processes)
                if ((await readyz(p)) !== 200) throw new Error(`${p.nodeId} is not ready`);
              await scene.expectExact();
              return Date.now() - frozenAt;
            },
            { timeoutMs: FROZEN_MS, intervalMs: 50, message: "ready and exact while frozen" },
          ).catch((err: unknown) => String(err));
          for (const ghost of ghosts) {
            await ghost.terminate();
            crowd.left(ghost);
          }
          await eventually(() => scene.expectExact(), {
            timeoutMs: CONVERGE_MS,
            message: "exact once the ghosts left",
          });
          const left = frozenAt + FROZEN_MS - Date.now();
          if (left > 0) await sleep(left);
          // The processes of the frozen server left it; those of the other stayed where they were.
          const moved = [...cluster.counters, ...cluster.gateways].filter((p) =>
            p.log().includes("bus server silent; moving to another"),
          );
          expect(moved.map((p) => p.nodeId).sort()).toEqual(["counter-1", "gateway-1"]);
          const dip = scene.deepestDip(frozenAt);
          console.info(`cluster one NATS server frozen: ${JSON.stringify({ movedMs, deepestDip: dip })}`);
          expect(typeof movedMs, String(movedMs)).toBe("number");
          expect(dip, "a watcher saw fewer viewers than the truth").toBeUndefined();
          await scene.expectExact();
        } finally {
          await frozen!.resume();
        }
        await eventually(() => scene.expectExact(), {
          timeoutMs: CONVERGE_MS,
          message: "exact after the thaw",
        });
        await sleep(LEASES.gatewayLeaseMs + MARGIN_MS);
        // The ghosts' joins the thaw passed on came to the running server's node, which dropped them.
        const stale = await cluster.counters[1]!.metric("livecount_counter_presence_stale_total");
        expect(stale, "presence passed on late and dropped").toBeGreaterThan(0);
        expect(scene.deepestDip(frozenAt), "a watcher saw fewer viewers than the truth").toBeUndefined();
        await scene.expectExact();
        expectAllRunning(cluster);
        expect(crowd.unexpectedCloses()).toEqual([]);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
