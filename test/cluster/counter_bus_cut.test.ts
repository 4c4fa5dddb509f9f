/**
 * A counter node cut off the bus (its link to NATS reset and refused) while it still reaches Redis,
 * for longer than the node lease: every other process forgets it, while it renews the leases of its
 * partitions in Redis, so nobody else can take them. What it changes meanwhile (grace windows
 * ending) it publishes to nobody.
 *
 * - With another counter node in the DC, which notes in Redis that it still hears the bus, the node
 *   cut off finds itself alone and hands every partition over (BusIsolation); the other serves them,
 *   and every page is exact at the watchers while the cut lasts. Its partitions come back to it once
 *   the link heals.
 * - Alone in its DC, nobody can prove that the bus carries: it keeps its partitions, and once the link
 *   heals, the gateways hear it as if for the first time and take fresh snapshots of its pages.
 */
import { afterAll, beforeAll, expect, onTestFailed, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { TIMINGS, TestCluster, type ClusterProcess } from "../support/cluster.js";
import type { LinkProxy } from "../support/link_proxy.js";
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
/** Long enough for a leave to reach its owner, inside the grace window: it ends cut off. */
const LEAVE_REACHES_OWNER_MS = 150;
/**
 * The grace window of the lone node's cluster: its leavers' windows must end after the cut, which
 * comes LEAVE_REACHES_OWNER_MS after their leaves on an idle host, later when the test process
 * stalls under load: with the usual 300 ms, a test process held up by a busy core cut the link after
 * the windows ended, and the watchers had seen the leaves.
 */
const LONE_GRACE_MS = 2000;
/**
 * The proof of a cut (apps/counter/src/bus_isolation.ts) takes 2 s at least, past the 1.5 s node
 * lease; then the partitions' flush, release and takeover.
 */
const HANDED_OVER_MS = 2000 + 2 * MARGIN_MS;
/**
 * How long the node that still hears the bus is frozen as the cut begins: past two of its 250 ms
 * steps (which ended its stretch of hearing before), short of the 1.5 s node lease.
 */
const OTHER_STALL_MS = 1000;
/** From the heal: the node reconnects (nats.js retries every reconnect wait), is heard, pages re-read. */
const BACK_MS = 10_000;

/** One more viewer per page on the second gateway, who leaves: their grace windows end after the cut. */
async function leaveJustBeforeCut(cluster: TestCluster, crowd: Crowd, scene: Scene): Promise<void> {
  const gateway2 = cluster.gateways[1]!;
  const leavers = await Promise.all(
    scene.pages.map((page) => crowd.join(gateway2.wsUrl, page, `${page}-leaver`)),
  );
  await eventually(() => scene.expectExact(), { timeoutMs: BACK_MS, message: "exact with the leavers" });
  for (const leaver of leavers) {
    await leaver.terminate();
    crowd.left(leaver);
  }
  await sleep(LEAVE_REACHES_OWNER_MS);
}

/** Heals the link and waits until every watcher is exact; returns how long that took. */
async function healAndWait(scene: Scene, counter: ClusterProcess, link: { heal(): void }): Promise<number> {
  const healedAt = Date.now();
  link.heal();
  return eventually(
    async () => {
      if ((await fetch(`${counter.url}/readyz`)).status !== 200)
        throw new Error(`${counter.nodeId} not ready`);
      scene.expectFramesExact();
      return Date.now() - healedAt;
    },
    { timeoutMs: BACK_MS, intervalMs: 50, message: "every watcher exact after the heal" },
  );
}

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

    /**
     * Cuts counter-1's link as `cut` says, past the node lease: counter-1 hands its partitions over,
     * every watcher is exact while the cut lasts (a viewer who joins meanwhile included), and again
     * once the link heals and it took its share back. Returns when each happened.
     */
    async function handOver(cut: (link: LinkProxy) => void, name: string): Promise<void> {
      onTestFailed(() => console.error(`\n----- logs -----\n${cluster.logs()}\n`));
      const cutPages = scene.pagesOwnedBy("counter-1");
      expect(cutPages.length, "pages owned by the node cut off").toBeGreaterThan(0);
      expect(cutPages.length, "pages owned by the other").toBeLessThan(scene.pages.length);
      await leaveJustBeforeCut(cluster, crowd, scene);
      const [counter1, counter2] = cluster.counters as [ClusterProcess, ClusterProcess];
      const isolations = await counter1.metric("livecount_counter_bus_isolations_total");
      const link = cluster.natsLinkOf(counter1);
      const cutAt = Date.now();
      cut(link);
      const handedOverMs = await eventually(
        async () => {
          for (const g of cluster.gateways)
            expect(await g.metric("livecount_gateway_counter_nodes"), `${g.nodeId}'s ring`).toBe(1);
          expect(await counter1.metric("livecount_counter_bus_isolated")).toBe(1);
          expect(await counter1.metric("livecount_counter_partitions_owned")).toBe(0);
          expect(await counter2.metric("livecount_counter_partitions_owned")).toBe(TIMINGS.partitions);
          scene.expectFramesExact();
          return Date.now() - cutAt;
        },
        { timeoutMs: HANDED_OVER_MS, intervalMs: 50, message: "handed over and exact while cut off" },
      );
      // No watcher saw a page dip through the hand-over.
      expect(scene.deepestDip(cutAt), "a watcher saw fewer viewers than the truth").toBeUndefined();
      // A viewer arriving on one of its pages while the cut lasts is counted there.
      await crowd.join(cluster.gateways[0]!.wsUrl, cutPages[0]!, `during-${name.replaceAll(" ", "-")}`);
      await eventually(() => scene.expectExact(), { timeoutMs: BACK_MS, message: "a join during the cut" });
      const joinCountedAt = Date.now();
      const backMs = await healAndWait(scene, counter1, link);
      await cluster.waitBalanced();
      expect(scene.deepestDip(joinCountedAt), "a dip as the partitions came back").toBeUndefined();
      console.info(`cluster counter node ${name}: ${JSON.stringify({ handedOverMs, backMs })}`);
      expect(await counter1.metric("livecount_counter_bus_isolated")).toBe(0);
      expect(await counter1.metric("livecount_counter_bus_isolations_total")).toBe(isolations + 1);
      // And it stays so once every lease and grace window since has run out.
      await sleep(TIMINGS.gatewayLeaseMs + MARGIN_MS);
      await scene.expectExact();
      expectAllRunning(cluster);
      expect(crowd.unexpectedCloses()).toEqual([]);
    }

    test(
      "cluster - a counter node cut off the bus while another hears it hands its partitions over: every page is exact while the cut lasts, and after it",
      () => handOver((link) => link.cut(), "cut off the bus"),
      TEST_TIMEOUT_MS,
    );

    test(
      "cluster - a counter node that hears nothing while it is still heard (a one-way cut) hands its partitions over too: its heartbeats say it leaves",
      () => handOver((link) => link.deafen(), "deaf on the bus"),
      TEST_TIMEOUT_MS,
    );

    test(
      "cluster - the node that still hears the bus, frozen as the cut begins (a long pause), proves the cut as soon: its own stall is no break in its hearing",
      () =>
        handOver((link) => {
          link.cut();
          const other = cluster.counters[1]!;
          other.pause();
          setTimeout(() => other.resume(), OTHER_STALL_MS);
        }, "cut off the bus, the other node frozen"),
      TEST_TIMEOUT_MS,
    );
  },
);

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - the only counter node of a DC cut off the bus past the node lease",
  () => {
    let cluster: TestCluster;
    let crowd: Crowd;
    let scene: Scene;

    beforeAll(async () => {
      cluster = await TestCluster.start({
        counters: 1,
        natsLinks: true,
        env: { LIVECOUNT_GRACE_MS: String(LONE_GRACE_MS) },
      });
      crowd = new Crowd();
      scene = await Scene.seat(cluster, crowd, "bus-cut-alone", PAGES);
    }, 60_000);

    afterAll(async () => {
      await crowd?.close();
      await cluster?.stop();
    });

    test(
      "cluster - the only counter node, forgotten while cut off the bus and heard again: the watchers get what it changed meanwhile",
      async () => {
        onTestFailed(() => console.error(`\n----- logs -----\n${cluster.logs()}\n`));
        await leaveJustBeforeCut(cluster, crowd, scene);
        const counter = cluster.counters[0]!;
        const link = cluster.natsLinkOf(counter);
        link.cut();
        await sleep(TIMINGS.nodeLeaseMs + MARGIN_MS);
        // Forgotten, and nobody to prove the bus carries: it keeps its partitions.
        for (const g of cluster.gateways)
          expect(await g.metric("livecount_gateway_counter_nodes"), `${g.nodeId}'s ring`).toBe(0);
        expect(await counter.metric("livecount_counter_bus_isolated")).toBe(0);
        expect(await counter.metric("livecount_counter_partitions_owned")).toBe(TIMINGS.partitions);
        // The watchers still show the leavers: their leaves went nowhere.
        expect(() => scene.expectFramesExact()).toThrow();
        const backMs = await healAndWait(scene, counter, link);
        console.info(`cluster only counter node cut off the bus: ${JSON.stringify({ backMs })}`);
        await scene.expectExact();
        await sleep(TIMINGS.gatewayLeaseMs + MARGIN_MS);
        await scene.expectExact();
        expectAllRunning(cluster);
        expect(crowd.unexpectedCloses()).toEqual([]);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
