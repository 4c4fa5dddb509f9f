/**
 * Idempotency keys across data centers when the receiving DC stores on Redis Cluster: its counter
 * nodes gather the other DC's keys before each import (CLUSTER_IMPORT_GATHER_MS), one script call
 * per partition, and a retry there is still answered as the change it repeats.
 */
import { Redis } from "ioredis";
import { afterAll, beforeAll, expect, onTestFailed, test } from "vitest";
import { CLUSTER_PUBLISHER_KEY } from "../support/cluster.js";
import { CONVERGE_MS } from "../support/dc_pages.js";
import { eventually } from "../support/eventually.js";
import { MultiDc } from "../support/multi_dc.js";
import { PublisherHttp } from "../support/publisher_http.js";
import { RedisCluster, describeWithRedisCluster } from "../support/redis_cluster.js";

const TEST_TIMEOUT_MS = 90_000;
const PAGES = 30;
const LIKES = 90;

describeWithRedisCluster("multi-dc - idempotency keys into a DC on Redis Cluster", () => {
  let redis: RedisCluster;
  let multi: MultiDc;
  beforeAll(async () => {
    redis = await RedisCluster.start();
    multi = await MultiDc.start({
      dcEnv: {
        dc2: {
          LIVECOUNT_REDIS_URL: "",
          LIVECOUNT_REDIS_CLUSTER: redis.seeds,
          LIVECOUNT_REDIS_WAIT_REPLICAS: "1",
        },
      },
    });
    await Promise.all([multi.dc("dc1").waitHeard("dc2"), multi.dc("dc2").waitHeard("dc1")]);
  }, TEST_TIMEOUT_MS);
  afterAll(async () => {
    await multi?.stop();
    await redis?.stop();
  });

  test(
    "likes of many pages retried in the cluster DC are all replays, and count once",
    async () => {
      onTestFailed(() => console.error(multi.logs()));
      const [dc1, dc2] = [multi.dc("dc1"), multi.dc("dc2")];
      const one = new PublisherHttp(dc1.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
      const two = new PublisherHttp(dc2.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
      const pageOf = (i: number) => `cluster-retried-${i % PAGES}`;
      // Spread over the partitions, as a DC's keys come: each import gathers several of them.
      const answers = await Promise.all(
        Array.from({ length: LIKES }, (_, i) => one.change(pageOf(i), "likes", 1, `like-${i}`)),
      );
      expect(answers.every((a) => a.status === 200)).toBe(true);
      await eventually(async () => expect(await dc2.keysStored()).toBe(LIKES), {
        timeoutMs: CONVERGE_MS,
        message: "dc2 stored every key of dc1",
      });
      const retries = await Promise.all(
        Array.from({ length: LIKES }, (_, i) => two.change(pageOf(i), "likes", 1, `like-${i}`)),
      );
      expect(
        retries.filter((r) => r.status === 200 && r.headers.get("idempotent-replayed") === "true"),
      ).toHaveLength(LIKES);
      await eventually(
        async () => {
          const totals = await Promise.all(
            Array.from({ length: PAGES }, async (_, i) => (await two.counters(pageOf(i))).likes ?? 0),
          );
          expect(totals.reduce((a, b) => a + b, 0)).toBe(LIKES);
        },
        { timeoutMs: CONVERGE_MS },
      );
      // dc2's nodes kept nothing in the DC's own Redis: the keys went to the cluster.
      const own = new Redis(dc2.redis.url, { lazyConnect: true });
      await own.connect();
      try {
        expect(await own.dbsize()).toBe(0);
      } finally {
        own.disconnect();
      }
    },
    TEST_TIMEOUT_MS,
  );
});
