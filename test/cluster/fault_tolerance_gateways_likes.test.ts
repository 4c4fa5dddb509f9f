/**
 * Fault tolerance of a one-data-center deployment made of real processes (as in
 * fault_tolerance.test.ts, which covers the counter nodes): gateways killed (SIGKILL) or frozen
 * past their lease, and likes retried with the same idempotency keys across crashes of every owner
 * and of redis-server. After each fault every page must read exactly what the clients hold,
 * through both gateways' HTTP API and their watchers' count frames.
 *
 * Deadlines derive from the leases in TIMINGS (cluster.ts); every wait polls, none asserts on a
 * fixed sleep. A failed test prints every process's log.
 */
import { expect, test } from "vitest";
import { Audience, longestDip } from "../support/audience.js";
import { expectExact, readCounter } from "../support/counter_reads.js";
import { LikeLedger } from "../support/like_ledger.js";
import { TIMINGS, type ClusterProcess } from "../support/cluster.js";
import { pageIds } from "../support/cluster_scene.js";
import {
  CONVERGE_MS,
  GATEWAY_LEASE_MS,
  SLACK_MS,
  TEST_TIMEOUT_MS,
  finishLikes,
  ownsEveryPartition,
  random,
  seatAudience,
  startCluster,
} from "../support/fault_scenes.js";
import { eventually } from "../support/eventually.js";
import { describeWithServers } from "../support/servers.js";

describeWithServers("cluster - fault tolerance with real processes: gateways and likes", () => {
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
});
