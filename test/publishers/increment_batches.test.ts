/**
 * Publisher increments travel from the gateway to the pages' owners in batches (one bus request per
 * owner for everything taken in one turn) and are group-committed there. In a real deployment
 * (nats-server, redis-server, two counter nodes and a gateway from the built output): a burst of
 * concurrent increments on one hot page is answered in full and counted exactly once, one item's
 * error stays that item's, and items of many pages reach each owner in one request.
 */
import { expect, test } from "vitest";
import { CLUSTER_PUBLISHER_KEY, TestCluster } from "../support/cluster.js";
import { PublisherHttp, type BatchItem } from "../support/publisher_http.js";
import { describeWithServers } from "../support/servers.js";

const TEST_TIMEOUT_MS = 60_000;
const CONCURRENT_PUTS = 300;
const REQUESTS = "livecount_gateway_increment_requests_total";
const SENT = "livecount_gateway_increments_sent_total";

describeWithServers("publishers - increment batches", () => {
  let cluster: TestCluster;
  let api: PublisherHttp;

  const start = async (): Promise<void> => {
    cluster = await TestCluster.forTest({ counters: 2, gateways: 1 });
    api = new PublisherHttp(cluster.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
  };

  /** The gateway's increment requests and increments sent since `before` (or since start). */
  const sentSince = async (
    before = { requests: 0, items: 0 },
  ): Promise<{ requests: number; items: number }> => {
    const gateway = cluster.gateways[0]!;
    return {
      requests: (await gateway.metric(REQUESTS)) - before.requests,
      items: (await gateway.metric(SENT)) - before.items,
    };
  };

  test(
    "batches - concurrent increments on one hot page are all answered and counted exactly once",
    async () => {
      await start();
      const page = "hot/page";
      const keys = Array.from({ length: CONCURRENT_PUTS }, (_, i) => `hot-${i}`);
      const first = await Promise.all(keys.map((key) => api.change(page, "likes", 1, key)));
      expect(first.map((r) => r.status)).toEqual(keys.map(() => 200));
      // Every value from 1 to N answered once: each increment saw exactly the ones before it.
      const values = first.map((r) => (r.body as { value: number }).value).sort((a, b) => a - b);
      expect(values).toEqual(keys.map((_, i) => i + 1));
      expect(await api.counters(page)).toEqual({ likes: CONCURRENT_PUTS });
      // Retries of every key, concurrent too, count nothing and answer the original values.
      const again = await Promise.all(keys.map((key) => api.change(page, "likes", 1, key)));
      expect(again.map((r) => r.headers.get("idempotent-replayed"))).toEqual(keys.map(() => "true"));
      expect(again.map((r) => r.body)).toEqual(first.map((r) => r.body));
      expect(await api.counters(page)).toEqual({ likes: CONCURRENT_PUTS });
      const sent = await sentSince();
      expect(sent.items).toBe(2 * CONCURRENT_PUTS);
      expect(sent.requests).toBeLessThanOrEqual(sent.items);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "batches - one item's error in a batch stays its own: the others count, in one request to the owner",
    async () => {
      await start();
      const page = "hot/conflicts";
      expect((await api.change(page, "likes", 1, "used-once")).status).toBe(200);
      const items: BatchItem[] = Array.from({ length: 50 }, (_, i) => ({
        page,
        counter: "likes",
        change: 1,
        id: `fresh-${i}`,
      }));
      // The key was used for +1: +2 under it is a conflict the owner finds, in the middle of the batch.
      items.splice(20, 0, { page, counter: "likes", change: 2, id: "used-once" });
      const before = await sentSince();
      const res = await api.batch(items);
      expect(res.status).toBe(200);
      const results = res.body.results;
      expect(results[20]).toMatchObject({ id: "used-once", error: { code: "idempotency_conflict" } });
      const others = results.filter((_, i) => i !== 20);
      expect(others.every((r) => "value" in r && !r.duplicate)).toBe(true);
      expect(await api.counters(page)).toEqual({ likes: 51 });
      // Every item of the batch went to the page's owner in one bus request.
      expect(await sentSince(before)).toEqual({ requests: 1, items: items.length });
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "batches - items of many pages reach their owners in one request each, each page exact",
    async () => {
      await start();
      const pages = Array.from({ length: 40 }, (_, i) => `spread-${i}`);
      const items: BatchItem[] = pages.flatMap((page, p) =>
        Array.from({ length: 5 }, (_, k) => ({ page, counter: "claps", change: p + 1, id: `s-${k}` })),
      );
      const before = await sentSince();
      const res = await api.batch(items);
      expect(res.status).toBe(200);
      expect(res.body.results.every((r) => "value" in r)).toBe(true);
      const sent = await sentSince(before);
      expect(sent.items).toBe(items.length);
      // Two counter nodes own the 40 pages: one request to each.
      expect(sent.requests).toBeLessThanOrEqual(cluster.counters.length);
      const totals = await api.totals(...pages);
      expect(totals.map((t) => t.counters.claps)).toEqual(pages.map((_, p) => 5 * (p + 1)));
    },
    TEST_TIMEOUT_MS,
  );
});
