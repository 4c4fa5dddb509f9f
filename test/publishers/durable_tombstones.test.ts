/**
 * Deletes and resets are ordinary PN-counter entries, so they are as durable as increments: in a
 * real deployment (nats-server, redis-server, a counter node and a gateway from the built output)
 * a tombstone, a reset and their idempotency keys survive a kill -9 of the counter node.
 */
import { expect, test } from "vitest";
import { CLUSTER_PUBLISHER_KEY, TestCluster } from "../support/cluster.js";
import { eventually } from "../support/eventually.js";
import { PublisherHttp } from "../support/publisher_http.js";
import { describeWithServers } from "../support/servers.js";

const TEST_TIMEOUT_MS = 60_000;

describeWithServers("publishers - durable deletes and resets", () => {
  test(
    "publishers - a tombstone, a reset and their keys survive kill -9 of the counter node",
    async () => {
      const cluster = await TestCluster.forTest({ counters: 1, gateways: 1 });
      const api = new PublisherHttp(cluster.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
      const page = "durable/tombstone";
      const seeded = await api.batch([
        { page, counter: "likes", change: 5, id: "seed-likes" },
        { page, counter: "shares", change: 2, id: "seed-shares" },
        { page, counter: "unread", change: 9, id: "seed-unread" },
      ]);
      expect(seeded.status).toBe(200);
      const deleted = await api.remove(page, "likes", { idempotencyKey: "delete-likes" });
      expect(deleted.body).toMatchObject({ previous: 5, deleted: true });
      const reset = await api.reset(page, "unread", { idempotencyKey: "reset-unread" });
      expect(reset.body).toMatchObject({ previous: 9 });
      expect(await api.counters(page)).toEqual({ shares: 2, unread: 0 });

      const [counter] = cluster.counters;
      await counter!.kill();
      await counter!.start();
      await cluster.waitBalanced();

      // The restarted node loads the page from Redis: the delete and the reset are still there.
      const after = await eventually(() => api.counters(page), { timeoutMs: 15_000 });
      expect(after).toEqual({ shares: 2, unread: 0 });
      // Their keys too: retries answer the original, and apply nothing.
      const retryDelete = await api.remove(page, "likes", { idempotencyKey: "delete-likes" });
      expect(retryDelete.body).toEqual(deleted.body);
      expect(retryDelete.headers.get("idempotent-replayed")).toBe("true");
      const retryReset = await api.reset(page, "unread", { idempotencyKey: "reset-unread" });
      expect(retryReset.body).toEqual(reset.body);
      // A later increment revives the deleted counter from zero.
      expect((await api.change(page, "likes", 1, "revive")).body).toMatchObject({ value: 1 });
      expect(await api.counters(page)).toEqual({ likes: 1, shares: 2, unread: 0 });
      const listed = await api.read(`prefix=${encodeURIComponent("durable/")}`);
      expect(listed.body.pages.map((p) => [p.page, p.counters])).toEqual([
        [page, { likes: 1, shares: 2, unread: 0 }],
      ]);
    },
    TEST_TIMEOUT_MS,
  );
});
