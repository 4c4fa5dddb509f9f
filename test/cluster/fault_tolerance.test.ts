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
import { Audience, longestDip } from "../support/audience.js";
import { expectExact, monitorLikeReads, readCounter } from "../support/counter_reads.js";
import { LikeLedger } from "../support/like_ledger.js";
import { TIMINGS, type ClusterProcess, type TestCluster } from "../support/cluster.js";
import { pageIds } from "../support/cluster_scene.js";
import { finishLikes, random, seatAudience, startChurn, startCluster } from "../support/fault_scenes.js";
import { eventually, sleep } from "../support/eventually.js";
import { describeWithServers } from "../support/servers.js";

/**
 * Slack over the lease arithmetic, for every timing promise checked here: sweeps (every 250 ms at
 * most), lease renewals, a poll interval and a loaded 2-core machine. Leases are 1.5 to 3 s, so a
 * lease taken twice as long as configured cannot pass.
 */
const SLACK_MS = 1500;
/** The gateway lease of the gateway-failure tests: twice the slack. */
const GATEWAY_LEASE_MS = 3000;
/** Until every page is exact when nothing failed. */
const CONVERGE_MS = 10_000;
const TEST_TIMEOUT_MS = 90_000;
const OWNED = "livecount_counter_partitions_owned";

/** Pages the ring gives to `node` while every counter node of the cluster is up. */
function pagesOwnedBy(cluster: TestCluster, node: ClusterProcess, pages: readonly string[]): Set<string> {
  const ring = new HashRing(
    cluster.counters.map((c) => c.nodeId),
    { partitions: TIMINGS.partitions, vnodes: TIMINGS.vnodes },
  );
  return new Set(pages.filter((p) => ring.ownerOf(partitionOf(p, TIMINGS.partitions)) === node.nodeId));
}

async function ownsEveryPartition(node: ClusterProcess, timeoutMs: number): Promise<void> {
  await eventually(
    async () => {
      const owned = await node.metric(OWNED);
      if (owned !== TIMINGS.partitions) throw new Error(`${node.nodeId} owns ${owned} partitions`);
    },
    { timeoutMs, intervalMs: 50, message: `${node.nodeId} owns every partition` },
  );
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

describeWithServers("cluster - fault tolerance with real processes", () => {
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
    "cluster - a gateway killed with SIGKILL stops counting its viewers within its lease, and its next incarnation counts",
    async () => {
      const cluster = await startCluster({ env: { LIVECOUNT_GATEWAY_LEASE_MS: String(GATEWAY_LEASE_MS) } });
      const rnd = random("gateway kill");
      const audience = await seatAudience(cluster, "gateway", 40, rnd, { otherGatewayChance: 0.4 });
      const likes = new LikeLedger(cluster, audience.pages, rnd);
      const stopLikes = finishLikes(likes.run());
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "before the crash" });

      const [keeper, victim] = cluster.gateways as [ClusterProcess, ClusterProcess];
      // A crashed incarnation ends by its lease lapsing, or, once a later one of its node id is
      // heard and it has missed a heartbeat, as a restart.
      const expiries = (): Promise<number[]> =>
        Promise.all(
          cluster.counters.map(
            async (c) =>
              (await c.metric("livecount_counter_gateway_expiries_total")) +
              (await c.metric("livecount_counter_gateway_restarts_total")),
          ),
        );
      const expiredBefore = await expiries();
      expect(audience.seatsOn(victim)).toBeGreaterThan(0);
      const beforeKill = new Map(audience.pages.map((p) => [p, audience.expected(p)]));
      const killedAt = Date.now();
      await victim.kill();
      await expectExact({
        cluster,
        audience,
        timeoutMs: GATEWAY_LEASE_MS + SLACK_MS,
        when: "after the gateway crash",
      });
      console.info(`gateway kill: its viewers gone ${Date.now() - killedAt} ms after the kill`);
      // The keeper's own viewers never stopped counting.
      const keeperWatcher = audience.watcherOf(keeper)!;
      for (const page of audience.pages) {
        expect(longestDip(keeperWatcher, page, killedAt, audience.expected(page)), page).toBe(0);
      }
      // The victim's viewers stopped counting when its lease ran out: not before (its last heartbeat
      // was about a third of a lease before the kill at most, later if its busy loop ran the timer
      // late: 250 ms of slack), and not more than the slack after.
      const dropped = audience.pages.filter((p) => audience.expected(p) < beforeKill.get(p)!);
      expect(dropped.length, "pages that lost viewers with the gateway").toBeGreaterThan(0);
      for (const page of dropped) {
        const drop = keeperWatcher.received.find(
          (r) =>
            r.at >= killedAt &&
            r.frame.type === "count" &&
            r.frame.page === page &&
            r.frame.viewers < beforeKill.get(page)!,
        );
        expect(drop, `a frame of ${page} showing the drop`).toBeDefined();
        const after = drop!.at - killedAt;
        expect(after, `${page}: drop after the kill, ms`).toBeGreaterThanOrEqual(
          (GATEWAY_LEASE_MS * 2) / 3 - 250,
        );
        expect(after, `${page}: drop after the kill, ms`).toBeLessThanOrEqual(GATEWAY_LEASE_MS + SLACK_MS);
      }

      // A new incarnation under the same node id counts; then it crashes too, and the one after it
      // seats viewers (some with the same ids) before the crashed one's lease runs out: the old
      // incarnation's expiry must take only its own viewers.
      await victim.start();
      await audience.populate(3);
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "after the restart" });
      const killedAgainAt = Date.now();
      await victim.kill();
      await victim.start();
      await audience.populate(3);
      const seatedAt = Date.now();
      expect(seatedAt - killedAgainAt, "new viewers seated before the old lease ran out").toBeLessThan(
        GATEWAY_LEASE_MS,
      );
      await eventually(
        async () => {
          const now = await expiries();
          if (now.some((n, i) => n < expiredBefore[i]! + 2)) throw new Error(`expiries ${now.join(",")}`);
        },
        { timeoutMs: GATEWAY_LEASE_MS + SLACK_MS, message: "both crashed incarnations ended" },
      );
      await stopLikes();
      await expectExact({
        cluster,
        audience,
        likes,
        timeoutMs: CONVERGE_MS,
        when: "after the old lease ran out",
      });
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "cluster - a gateway frozen past its lease gives its viewers back to the owners when it resumes",
    async () => {
      const cluster = await startCluster();
      const rnd = random("gateway freeze");
      const audience = await seatAudience(cluster, "gwfreeze", 20, rnd, { otherGatewayChance: 0.4 });
      await expectExact({ cluster, audience, timeoutMs: CONVERGE_MS, when: "before the freeze" });

      const frozen = cluster.gateways[1]!;
      expect(audience.seatsOn(frozen)).toBeGreaterThan(0);
      const expiries = async (): Promise<number> =>
        (
          await Promise.all(cluster.counters.map((c) => c.metric("livecount_counter_gateway_expiries_total")))
        ).reduce((a, b) => a + b, 0);
      const before = await expiries();
      // Frozen longer than its lease: the owners drop its viewers, though every socket stays open.
      frozen.pause();
      await eventually(
        async () => {
          if ((await expiries()) <= before) throw new Error("the frozen gateway's lease has not lapsed yet");
        },
        { timeoutMs: TIMINGS.gatewayLeaseMs + SLACK_MS },
      );
      frozen.resume();
      await expectExact({
        cluster,
        audience,
        timeoutMs: CONVERGE_MS,
        when: "after the frozen gateway resumed",
      });
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "cluster - likes retried with the same idempotency keys count once across crashes of every owner",
    async () => {
      const cluster = await startCluster();
      const rnd = random("likes");
      const audience = new Audience(cluster, pageIds("likes", 20), rnd);
      const likes = new LikeLedger(cluster, audience.pages, rnd);
      const stopLikes = finishLikes(likes.run(8));
      await likes.waitAcknowledged(50);
      const [first, second] = cluster.counters as [ClusterProcess, ClusterProcess];
      for (const [victim, survivor] of [
        [first, second],
        [second, first],
      ] as const) {
        await victim.kill();
        await ownsEveryPartition(survivor, TIMINGS.nodeLeaseMs + TIMINGS.partitionLeaseMs + SLACK_MS);
        await likes.waitAcknowledged(30);
        await victim.start();
        await cluster.waitBalanced();
        await likes.waitAcknowledged(30);
      }
      await stopLikes();
      await expectExact({ cluster, audience, likes, timeoutMs: CONVERGE_MS, when: "after the crashes" });
      console.info(`likes: ${likes.totalKeys} keys, ${JSON.stringify(likes.stats)}`);
      expect(likes.stats.replayed, "some likes were answered as replays").toBeGreaterThan(0);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "cluster - acknowledged likes survive SIGKILL of every counter node and of redis-server (AOF, fsync always)",
    async () => {
      const cluster = await startCluster({ redis: { appendonly: true, appendfsync: "always" } });
      const rnd = random("durability");
      const audience = await seatAudience(cluster, "durable", 20, rnd);
      const likes = new LikeLedger(cluster, audience.pages, rnd);
      const stopLikes = finishLikes(likes.run(12));
      await likes.waitAcknowledged(150);

      // Everything durable dies at once, with likes in flight; they are retried until answered.
      const acknowledged = new Map(audience.pages.map((p) => [p, likes.acknowledged(p)]));
      await Promise.all([...cluster.counters.map((c) => c.kill()), cluster.redis.kill()]);
      const stopping = stopLikes();
      await cluster.redis.restart();
      await Promise.all(cluster.counters.map((c) => c.start()));
      await cluster.waitBalanced();
      // The first reads after the restart already hold every like acknowledged before the crash.
      const gateway = cluster.gateways[0]!;
      for (const page of audience.pages) {
        const read = await eventually(() => readCounter(gateway, page), { message: `read ${page}` });
        expect(read.counters.likes ?? 0, page).toBeGreaterThanOrEqual(acknowledged.get(page)!);
      }
      await stopping;
      await expectExact({ cluster, audience, likes, timeoutMs: CONVERGE_MS, when: "after the restart" });
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
