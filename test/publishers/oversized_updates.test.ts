/**
 * A page whose entries pass what NATS takes in one message (its `max_payload`, 1 MiB by default;
 * here 64 KiB, so a page of a few hundred long counter names passes it). Its updates cannot travel,
 * and that must cost only that page's updates: a publish the bus refused used to fail the whole
 * flush, which wrote every page of it again and failed the same way at every try, so no page of the
 * node reached a watcher again; a read of the page waited out the request timeout (504).
 */
import { expect, onTestFinished, test } from "vitest";
import { CLUSTER_PUBLISHER_KEY, TestCluster } from "../support/cluster.js";
import { PublisherHttp, longCounterName } from "../support/publisher_http.js";
import { describeWithServers } from "../support/servers.js";
import { TestClient } from "../support/ws_client.js";

const TEST_TIMEOUT_MS = 90_000;
const MAX_PAYLOAD = 64 * 1024;
/** Counters of 64-character names on the big page: about 100 bytes each in an update. */
const BIG_COUNTERS = 1000;
/** Items per batch request: 100 long names are about 12 KB on the way to the owner. */
const BATCH_ITEMS = 100;
/** Viewers who join both pages, one after another. */
const VIEWERS = 3;
/** The gateway's wait for its owner: a read that waited it out took this long. */
const REQUEST_TIMEOUT_MS = 20_000;

describeWithServers("publishers - a page too large for the bus", () => {
  test(
    "costs only its own updates: other pages keep reaching watchers, a read of it fails at once",
    async () => {
      const cluster = await TestCluster.forTest({
        counters: 1,
        gateways: 1,
        natsConfig: `max_payload: ${MAX_PAYLOAD}`,
        env: {
          LIVECOUNT_MAX_COUNTERS_PER_PAGE: String(2 * BIG_COUNTERS),
          LIVECOUNT_PUBLISHER_BURST: String(2 * BIG_COUNTERS),
          LIVECOUNT_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
        },
      });
      const [gateway] = cluster.gateways;
      const [node] = cluster.counters;
      const api = new PublisherHttp(gateway!.url, CLUSTER_PUBLISHER_KEY);
      const watcher = await TestClient.connect(gateway!.wsUrl);
      const viewers: TestClient[] = [];
      onTestFinished(async () => {
        await Promise.all([watcher, ...viewers].map((c) => c.terminate()));
      });

      // The big page, in batches whose requests to the owner fit the bus: each is stored and
      // answered, and its update (the batch's counters) travels until one passes the limit.
      for (let from = 0; from < BIG_COUNTERS; from += BATCH_ITEMS) {
        const items = Array.from({ length: BATCH_ITEMS }, (_, i) => ({
          page: "big",
          counter: longCounterName(from + i),
          change: 1,
          id: `big-${from + i}`,
        }));
        const res = await api.batch(items);
        expect(res.status).toBe(200);
        expect(res.body.results.filter((r) => "error" in r)).toEqual([]);
      }

      // Pages flushed beside it, again and again: a viewer on the big page makes it flush its
      // entries (all of them) with every change of presence there.
      watcher.watch("small");
      for (let i = 1; i <= VIEWERS; i++) {
        const viewer = await TestClient.connect(gateway!.wsUrl);
        viewers.push(viewer);
        viewer.join("big", `v${i}`);
        viewer.join("small", `v${i}`);
        await expect.poll(() => watcher.lastCount("small")?.viewers, { timeout: 20_000 }).toBe(i);
      }
      expect((await api.change("small", "likes", 5, "small-1")).status).toBe(200);
      await expect.poll(() => watcher.lastCount("small")?.counters.likes, { timeout: 20_000 }).toBe(5);
      expect(await node!.metric("livecount_counter_flush_failures_total")).toBe(0);
      // Each flush of the big page's entries (at every change of presence there) was refused.
      expect(await node!.metric("livecount_counter_update_publish_failures_total")).toBeGreaterThanOrEqual(
        VIEWERS,
      );

      // A read of the big page: its owner's answer is too large too, and the gateway hears so now.
      const readAt = Date.now();
      const read = await api.read("page=big");
      expect(read.status).toBe(503);
      expect(read.body.error?.code).toBe("unavailable");
      expect(Date.now() - readAt, "answered long before the request timeout, ms").toBeLessThan(
        REQUEST_TIMEOUT_MS / 2,
      );
      // What it holds is stored and counted all the same (read from the store by its owner).
      expect(await api.counters("small")).toEqual({ likes: 5 });
    },
    TEST_TIMEOUT_MS,
  );
});
