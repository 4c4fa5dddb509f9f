/**
 * What a page may hold, at the limits, through the public API:
 *
 * - LIVECOUNT_MAX_COUNTERS_PER_PAGE: a page holding that many counters refuses a change to a new one
 *   (PUT and batch items alike), its own keep counting, and another page has room of its own;
 * - a counter's entry stays a safe integer: a change past 2^53 - 1 is refused, and a retry of the
 *   change that reached it is still answered as that change.
 */
import { DEFAULT_PARTITIONS, partitionOf } from "@livecount/ring";
import { RedisStore } from "@livecount/store";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { PublisherHttp } from "../../../test/support/publisher_http.js";
import { RedisServer, describeWithRedis } from "../../../test/support/redis_server.js";

const MAX = 3;

describe("gateway - page limits", () => {
  let platform: TestPlatform;
  let api: PublisherHttp;

  beforeAll(async () => {
    platform = await TestPlatform.start({ LIVECOUNT_MAX_COUNTERS_PER_PAGE: String(MAX) });
    api = new PublisherHttp(platform.url, TEST_PUBLISHER_KEY);
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("gateway - past LIVECOUNT_MAX_COUNTERS_PER_PAGE a new counter is refused with invalid_counter and changes nothing", async () => {
    const page = "counters-cap";
    for (const counter of ["a", "b", "c"]) expect((await api.change(page, counter, 1)).status).toBe(200);
    const refused = await api.change(page, "d", 1);
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ error: { code: "invalid_counter" } });
    const batch = await api.batch([
      { page, counter: "a", change: 1, id: "cap-a" },
      { page, counter: "e", change: 1, id: "cap-e" },
    ]);
    expect(batch.status).toBe(200);
    expect(batch.body.results.map((r) => ("error" in r ? r.error.code : "ok"))).toEqual([
      "ok",
      "invalid_counter",
    ]);
    expect((await platform.counter(page)).counters).toEqual({ a: 2, b: 1, c: 1 });
    expect((await api.change("counters-cap-other", "d", 1)).status).toBe(200);
  });
});

describeWithRedis("gateway - a counter's entry at 2^53 - 1", () => {
  const LIMIT = Number.MAX_SAFE_INTEGER;
  const page = "entry-limit";
  let redis: RedisServer;
  let platform: TestPlatform;
  let api: PublisherHttp;

  beforeAll(async () => {
    redis = await RedisServer.start();
    // A change is at most 10^9 over the API: the entry is seeded near the limit through the store,
    // under a lease of its own that is let go before the platform's owner takes the partition.
    const store = await RedisStore.connect({ url: redis.url });
    try {
      const fence = await store.acquire(partitionOf(page, DEFAULT_PARTITIONS), "seed", 60_000);
      if (fence === null) throw new Error("no lease to seed with");
      const [seeded] = await store.increment(
        [{ fence, page, counter: "a", dc: "dc1", delta: LIMIT - 5, key: "seed", payload: "{}" }],
        60_000,
      );
      expect(seeded?.kind).toBe("applied");
      await store.release(fence);
    } finally {
      await store.close();
    }
    platform = await TestPlatform.start({ LIVECOUNT_REDIS_URL: redis.url });
    api = new PublisherHttp(platform.url, TEST_PUBLISHER_KEY);
  });

  afterAll(async () => {
    await platform?.close();
    await redis?.stop();
  });

  test("gateway - a change past 2^53 - 1 is 400 invalid_body and changes nothing; a retry of the change that reached it is its duplicate", async () => {
    const reached = await api.change(page, "a", 5, "reach");
    expect(reached.status).toBe(200);
    expect(reached.body).toMatchObject({ value: LIMIT });
    const past = await api.change(page, "a", 1, "past");
    expect(past.status).toBe(400);
    expect(past.body).toMatchObject({
      error: { code: "invalid_body", message: expect.stringContaining(String(LIMIT)) },
    });
    // The owner sees the entry at the limit; only the store, reading the key first, can tell a retry.
    const retry = await api.change(page, "a", 5, "reach");
    expect(retry.status).toBe(200);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.body).toEqual(reached.body);
    const batch = await api.batch([
      { page, counter: "a", change: 5, id: "reach" },
      { page, counter: "a", change: 2, id: "past-in-batch" },
      { page, counter: "a", change: -3, id: "down" },
    ]);
    expect(batch.body.results.map((r) => ("error" in r ? r.error.code : r.duplicate))).toEqual([
      true,
      "invalid_body",
      false,
    ]);
    expect((await platform.counter(page)).counters).toEqual({ a: LIMIT - 3 });
  });
});
