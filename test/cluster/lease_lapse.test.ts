/**
 * A counter node whose partition leases ran out in its own view (its store answered late, or the
 * process stalled past them) and were then renewed late keeps them: nobody took them meanwhile. With
 * real processes: the node left after the other's kill -9 sends its takeover while its Redis link
 * holds every call for longer than a lease, so the leases it takes are already out of date when
 * their answers come. It serves them once its next renewal is answered in time.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { expect, test } from "vitest";
import { CLUSTER_PUBLISHER_KEY, TIMINGS, type ClusterProcess } from "../support/cluster.js";
import { eventually } from "../support/eventually.js";
import { OWNED, startCluster } from "../support/fault_scenes.js";
import { PublisherHttp } from "../support/publisher_http.js";
import { describeWithServers } from "../support/servers.js";

const TEST_TIMEOUT_MS = 60_000;
/** Short, so the hold below outlasts a lease and still ends before the store's command timeout (5 s). */
const PARTITION_LEASE_MS = 1000;
/**
 * How long the survivor's calls are held once it asked for the victim's partitions: longer than a
 * lease, so those it takes are out of date when the answers come. It began holding at the kill,
 * a node lease (1.5 s) before: a renewal sent just before the kill waits about 3 s, inside the 5 s.
 */
const HOLD_AFTER_ASKING_MS = PARTITION_LEASE_MS + 500;
/** A lease cycle and a few bootstrap retries after the hold, with slack for a loaded host. */
const READY_AFTER_MS = 8000;

describeWithServers("cluster - leases that ran out and were renewed late", () => {
  test(
    "cluster - partitions taken over while the node's Redis answered past their lease serve once its renewals are answered in time",
    async () => {
      const cluster = await startCluster({
        counters: 2,
        gateways: 1,
        redisLinks: true,
        // At info, a node logs each change of its ring: when the survivor asks for the victim's partitions.
        env: { LIVECOUNT_PARTITION_LEASE_MS: String(PARTITION_LEASE_MS), LIVECOUNT_LOG_LEVEL: "info" },
      });
      const [survivor, victim] = cluster.counters as [ClusterProcess, ClusterProcess];
      const api = new PublisherHttp(cluster.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
      const pages = Array.from({ length: 16 }, (_, i) => `lapse/${i}`);
      await api.batch(pages.map((page, i) => ({ page, counter: "likes", change: i + 1, id: `seed-${i}` })));

      const link = cluster.redisLinkOf(survivor);
      const alone = (): number =>
        survivor
          .log()
          .split("\n")
          .filter((line) => line.includes('"msg":"ring changed"') && line.includes('"nodes":["counter-1"]'))
          .length;
      const aloneBefore = alone();
      await victim.kill();
      link.hold();
      // The ring gives the survivor every partition once the victim's node lease ends, and it asks
      // for the victim's at once (held here).
      await eventually(() => expect(alone()).toBe(aloneBefore + 1), { timeoutMs: 10_000, intervalMs: 20 });
      await sleep(HOLD_AFTER_ASKING_MS);
      link.heal();
      const healedAt = performance.now();

      await survivor.waitReady(READY_AFTER_MS);
      const readyMs = Math.round(performance.now() - healedAt);
      expect(await survivor.metric(OWNED)).toBe(TIMINGS.partitions);
      console.log(JSON.stringify({ readyMs }));
      const read = await api.read(`prefix=${encodeURIComponent("lapse/")}`);
      expect(Object.fromEntries(read.body.pages.map((p) => [p.page, p.counters]))).toEqual(
        Object.fromEntries(pages.map((page, i) => [page, { likes: i + 1 }])),
      );
    },
    TEST_TIMEOUT_MS,
  );
});
