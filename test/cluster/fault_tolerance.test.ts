/**
 * Fault tolerance of a one-data-center deployment made of real processes: nats-server,
 * redis-server, two counter nodes and two gateways from the built output, real WebSocket clients
 * and real HTTP. Processes are killed (SIGKILL), frozen (SIGSTOP/SIGCONT), stopped (SIGTERM),
 * restarted with the same node id, or cut off from Redis; after each fault every page must read
 * exactly what the clients hold: distinct viewer ids with an open socket, and one like per distinct
 * idempotency key, through both gateways' HTTP API and their watchers' count frames.
 *
 * Deadlines derive from the leases in TIMINGS (cluster.ts); every wait polls, none asserts on a
 * fixed sleep. A failed test prints every process's log.
 */
import { HashRing, partitionOf } from "@livecount/ring";
import { Redis } from "ioredis";
import { expect, onTestFinished, test } from "vitest";
import { longestDip } from "../support/audience.js";
import { expectExact, monitorLikeReads } from "../support/counter_reads.js";
import { LikeLedger } from "../support/like_ledger.js";
import { TIMINGS, type ClusterProcess, type TestCluster } from "../support/cluster.js";
import {
  CONVERGE_MS,
  OWNED,
  SLACK_MS,
  TEST_TIMEOUT_MS,
  finishLikes,
  ownsEveryPartition,
  random,
  seatAudience,
  startChurn,
  startCluster,
} from "../support/fault_scenes.js";
import { eventually, sleep } from "../support/eventually.js";
import { describeWithServers } from "../support/servers.js";

/** Pages the ring gives to `node` while every counter node of the cluster is up. */
function pagesOwnedBy(cluster: TestCluster, node: ClusterProcess, pages: readonly string[]): Set<string> {
  const ring = new HashRing(
    cluster.counters.map((c) => c.nodeId),
    { partitions: TIMINGS.partitions, vnodes: TIMINGS.vnodes },
  );
  return new Set(pages.filter((p) => ring.ownerOf(partitionOf(p, TIMINGS.partitions)) === node.nodeId));
}

/** The expiries of the partition leases the store says `node` holds (any incarnation of it). */
async function leasesOf(cluster: TestCluster, node: ClusterProcess): Promise<number[]> {
  const redis = new Redis(cluster.redis.url);
  try {
    const leases = await Promise.all(
      Array.from({ length: TIMINGS.partitions }, (_, p) => redis.hmget(`lc:lease:${p}`, "node", "expiresAt")),
    );
    return leases
      .filter(([holder]) => holder?.startsWith(`${node.nodeId}/`) === true)
      .map(([, expiresAt]) => Number(expiresAt));
  } finally {
    redis.disconnect();
  }
}

/**
 * When `node`'s partition leases run out in the store: the latest expiry among those it holds, as it
 * last renewed them (its clock, this host's). A renewal in flight at the moment of the read can only
 * move that later, so no other node may take them over before the time returned.
 */
async function leasesRunOutAt(cluster: TestCluster, node: ClusterProcess): Promise<number> {
  const expiries = await leasesOf(cluster, node);
  if (expiries.length === 0) throw new Error(`${node.nodeId} holds no partition lease`);
  return Math.max(...expiries);
}

describeWithServers("cluster - fault tolerance with real processes: counter nodes", () => {
  test(
    "cluster - every page counts the distinct viewer ids with an open socket, over both gateways",
    async () => {
      const cluster = await startCluster();
      const audience = await seatAudience(cluster, "exact", 50, random("exact"));
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "after the joins" });

      const churn = startChurn(audience);
      await churn.waitFor(100);
      await churn.stop();
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "after churn" });
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "cluster - a counter node killed with SIGKILL is taken over, comes back with its node id, and every page stays exact",
    async () => {
      const cluster = await startCluster();
      const rnd = random("node kill");
      const audience = await seatAudience(cluster, "kill", 50, rnd);
      const likes = new LikeLedger(cluster, audience.pages, rnd);
      const stopLikes = finishLikes(likes.run());
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "before the crash" });

      const [victim, survivor] = cluster.counters as [ClusterProcess, ClusterProcess];
      const churn = startChurn(audience);
      await churn.waitFor(20);
      const killedAt = Date.now();
      await victim.kill();
      const takeoverMs = TIMINGS.nodeLeaseMs + TIMINGS.partitionLeaseMs + TIMINGS.settleMs;
      await ownsEveryPartition(survivor, takeoverMs + SLACK_MS);
      await churn.waitFor(30);
      await churn.stop();
      const settledAt = Math.max(killedAt + takeoverMs, Date.now() + TIMINGS.graceMs);
      await expectExact({
        cluster,
        audience,
        timeoutMs: settledAt - Date.now() + SLACK_MS,
        when: "after the takeover",
      });
      console.info(`node kill: every page exact ${Date.now() - killedAt} ms after the kill`);

      await victim.start();
      await cluster.waitBalanced();
      const churnAgain = startChurn(audience);
      await churnAgain.waitFor(30);
      await churnAgain.stop();
      await stopLikes();
      await expectExact({ cluster, audience, likes, timeoutMs: CONVERGE_MS, when: "after the restart" });
      expect(likes.totalKeys).toBeGreaterThan(0);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "cluster - a counter node killed with SIGKILL is taken over with no dip, even where a gateway resyncs late: the next owner holds the stored viewers for the settle window",
    async () => {
      // A gateway lease long enough for a gateway to stay frozen through the takeover and keep it.
      const gatewayLeaseMs = 6000;
      const settleMs = gatewayLeaseMs / 3;
      const cluster = await startCluster({ env: { LIVECOUNT_GATEWAY_LEASE_MS: String(gatewayLeaseMs) } });
      const audience = await seatAudience(cluster, "nodip", 40, random("kill without dip"));
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "before the crash" });
      const [victim, survivor] = cluster.counters as [ClusterProcess, ClusterProcess];
      const [steady, late] = cluster.gateways as [ClusterProcess, ClusterProcess];
      expect(audience.seatsOn(late), "viewers on the gateway that resyncs late").toBeGreaterThan(0);

      // `late` is frozen through the takeover: its viewers reach the survivor only when it resumes,
      // within the settle window. Until then only the stored viewers can stand for them.
      const since = Date.now();
      late.pause();
      await victim.kill();
      await ownsEveryPartition(survivor, TIMINGS.nodeLeaseMs + TIMINGS.partitionLeaseMs + SLACK_MS);
      const tookOverAt = Date.now();
      late.resume();
      expect(Date.now() - since, "frozen for less than the gateway lease").toBeLessThan(gatewayLeaseMs);
      await sleep(Math.max(0, tookOverAt + settleMs - Date.now()) + TIMINGS.coalesceMs * 5);
      await expectExact({ cluster, audience, timeoutMs: SLACK_MS, when: "after the takeover" });
      const watcher = audience.watcherOf(steady)!;
      for (const page of audience.pages) {
        const dip = longestDip(watcher, page, since, audience.expected(page));
        expect(dip, `${steady.nodeId} watcher of ${page} dipped for ${dip} ms`).toBe(0);
      }
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "cluster - an owner frozen past its leases finds them lost on resuming, serves nothing stale, and counts and likes stay exact",
    async () => {
      const cluster = await startCluster();
      const rnd = random("freeze");
      const audience = await seatAudience(cluster, "freeze", 50, rnd);
      const likes = new LikeLedger(cluster, audience.pages, rnd);
      const stopLikes = finishLikes(likes.run());
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "before the freeze" });

      const [victim, survivor] = cluster.counters as [ClusterProcess, ClusterProcess];
      const [quiet, busy] = cluster.gateways as [ClusterProcess, ClusterProcess];
      const victimPages = pagesOwnedBy(cluster, victim, audience.pages);
      // Viewers of `quiet` leave the victim's pages just before it freezes: it is frozen holding
      // lingering viewers, so it has entries to write the moment it resumes, with leases that ran out.
      const opsBefore = await victim.metric("livecount_counter_presence_ops_total");
      const left = await audience.leaveEverywhere(quiet, victimPages);
      await eventually(async () => {
        const ops = await victim.metric("livecount_counter_presence_ops_total");
        if (ops < opsBefore + left) throw new Error(`${ops - opsBefore} of ${left} leaves applied`);
      });
      victim.pause();
      const leasesRunOut = await leasesRunOutAt(cluster, victim);
      // A viewer joins on `quiet` while the owner is frozen, and leaves once the survivor took over:
      // its join waits in the frozen owner's socket, stale, and `quiet` holds nobody on the victim's
      // pages at the end, so no resync would ever correct that join if it were applied late.
      const [stalePage] = [...victimPages];
      const staleSeat = await audience.join(quiet, stalePage!, "stale-join");
      const reads = monitorLikeReads(cluster, likes, [...victimPages]);
      onTestFinished(async () => void (await reads.stop()));
      const churn = startChurn(audience, [busy]);
      await ownsEveryPartition(survivor, TIMINGS.nodeLeaseMs + TIMINGS.partitionLeaseMs + SLACK_MS);
      // The survivor took every partition over only once the victim's leases ran out in the store.
      expect(Date.now(), "taken over before the frozen owner's leases ran out").toBeGreaterThanOrEqual(
        leasesRunOut,
      );
      await audience.leave(staleSeat!, "close");
      await churn.waitFor(30);
      await likes.waitAcknowledged(20);
      victim.resume();
      await cluster.waitBalanced();
      await churn.waitFor(20);
      await churn.stop();
      await stopLikes();
      await expectExact({ cluster, audience, likes, timeoutMs: CONVERGE_MS, when: "after the resume" });
      const staleReads = await reads.stop();

      const log = victim.log();
      expect(log, "the resumed owner found its leases lost").toContain("partition lease lost");
      const stale = await victim.metric("livecount_counter_increments_total", 'outcome="stale"');
      console.info(
        `freeze: ${reads.reads} reads during the freeze (failed: ${JSON.stringify(reads.failures)}), ` +
          `${stale} stale increments rejected, ` +
          `${log.split("\n").filter((l) => l.includes("partition lease lost")).length} leases found lost`,
      );
      expect(staleReads, "no read showed fewer likes than were acknowledged").toEqual([]);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "cluster - an owner frozen longer than a gateway lease but within its own leases keeps every viewer",
    async () => {
      // Gateway leases shorter than the node's own: a freeze can outlast the first and not the others.
      const leases = { gatewayLeaseMs: 1000, nodeLeaseMs: 4000, partitionLeaseMs: 4000 };
      const cluster = await startCluster({
        env: {
          LIVECOUNT_GATEWAY_LEASE_MS: String(leases.gatewayLeaseMs),
          LIVECOUNT_NODE_LEASE_MS: String(leases.nodeLeaseMs),
          LIVECOUNT_PARTITION_LEASE_MS: String(leases.partitionLeaseMs),
        },
      });
      const rnd = random("short freeze");
      const audience = await seatAudience(cluster, "stall", 30, rnd);
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "before the freeze" });

      const [victim, survivor] = cluster.counters as [ClusterProcess, ClusterProcess];
      const ownedBefore = await victim.metric(OWNED);
      victim.pause();
      // The fault: a stall (GC, a starved VM) 1.6 gateway leases long, well within the node's leases.
      await sleep(leases.gatewayLeaseMs * 1.6);
      victim.resume();
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "after the freeze" });
      // Nothing failed over: the ring and the leases stayed as they were.
      expect(await victim.metric(OWNED)).toBe(ownedBefore);
      expect(await survivor.metric(OWNED)).toBe(TIMINGS.partitions - ownedBefore);
      const churn = startChurn(audience);
      await churn.waitFor(30);
      await churn.stop();
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "after churn" });
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "cluster - a counter node cut off from redis past its partition lease counts exactly again once the link heals",
    async () => {
      const cluster = await startCluster({ redisLinks: true });
      const rnd = random("redis link");
      const audience = await seatAudience(cluster, "cutoff", 50, rnd);
      const likes = new LikeLedger(cluster, audience.pages, rnd);
      const stopLikes = finishLikes(likes.run());
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "before the cut" });

      const victim = cluster.counters[0]!;
      const link = cluster.redisLinkOf(victim);
      link.cut();
      // Its leases run out unrenewed while it stays on the ring: nobody else may take its partitions,
      // and it may not serve them. Requests for its pages fail and are retried meanwhile.
      await eventually(
        async () => {
          const res = await fetch(`${victim.url}/readyz`);
          if (res.status === 200) throw new Error(`${victim.nodeId} still ready`);
        },
        { timeoutMs: TIMINGS.partitionLeaseMs + SLACK_MS, message: `${victim.nodeId} not ready` },
      );
      const churn = startChurn(audience);
      await churn.waitFor(30);
      link.heal();
      await cluster.waitBalanced();
      await churn.waitFor(20);
      await churn.stop();
      await stopLikes();
      await expectExact({ cluster, audience, likes, timeoutMs: CONVERGE_MS, when: "after the link healed" });
      // Nobody took them meanwhile: the node renews them with their epochs once the link is back,
      // keeping its pages in memory, rather than losing and taking them again.
      expect(victim.log(), "the node renewed its leases").toContain(
        "partition leases renewed after they ran out",
      );
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "cluster - a counter node stopped with SIGTERM hands its partitions over with no dip",
    async () => {
      const cluster = await startCluster();
      const rnd = random("handover");
      const audience = await seatAudience(cluster, "handover", 50, rnd);
      const likes = new LikeLedger(cluster, audience.pages, rnd);
      const stopLikes = finishLikes(likes.run());
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "before the handover" });

      const [victim, survivor] = cluster.counters as [ClusterProcess, ClusterProcess];
      const since = Date.now();
      const handedOver = ownsEveryPartition(survivor, TIMINGS.nodeLeaseMs + SLACK_MS);
      const status = await victim.terminate();
      expect(status.code, "exit status after SIGTERM").toBe(0);
      // A handover, not an expiry: the node released every lease before it exited (a release
      // deletes it), so none was left to run out.
      expect(await leasesOf(cluster, victim), "leases the stopped node still held").toEqual([]);
      await handedOver;
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "after the handover" });
      console.info(`handover: every page exact ${Date.now() - since} ms after SIGTERM`);
      for (const gateway of cluster.gateways) {
        const watcher = audience.watcherOf(gateway)!;
        for (const page of audience.pages) {
          // No viewer moved: the next owner holds the stored viewers while gateways resync (the
          // settle window), so no frame shows fewer.
          const dip = longestDip(watcher, page, since, audience.expected(page));
          expect(dip, `${gateway.nodeId} watcher of ${page} dipped for ${dip} ms`).toBe(0);
        }
      }

      const churn = startChurn(audience);
      await churn.waitFor(30);
      await churn.stop();
      await stopLikes();
      await expectExact({ cluster, audience, likes, timeoutMs: CONVERGE_MS, when: "after churn" });
    },
    TEST_TIMEOUT_MS,
  );
});
