/**
 * Resets and deletes of the publisher API against a real gateway (uWS on a free port, counter node,
 * in-memory bus and store, or Redis): the value cancelled, retries by key, deleted counters hidden
 * everywhere until used again, and resets racing increments. Plain HTTP, no SDK.
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { mulberry32, testSeed } from "../../../test/support/prng.js";
import { RedisServer, describeWithRedis } from "../../../test/support/redis_server.js";
import { PublisherHttp, type PageRaw, type ResetBody } from "../../../test/support/publisher_http.js";
import { codeOf, publisherGateway } from "./publisher_gateway.js";

describe("gateway - publisher API", () => {
  const gateway = publisherGateway();

  describe("resets", () => {
    test("reset - sets a counter to zero and answers the value it cancelled", async () => {
      const page = "reset-basic";
      await gateway.api.batch([
        { page, counter: "unread", change: 7, id: "u1" },
        { page, counter: "other", change: 1, id: "u2" },
      ]);
      const res = await gateway.api.reset(page, "unread", { idempotencyKey: "read-all-1" });
      expect(res.status).toBe(200);
      expect(res.headers.get("idempotent-replayed")).toBeNull();
      expect(res.body).toMatchObject({ page, counter: "unread", value: 0, previous: 7 });
      expect(res.body.deleted).toBeUndefined();
      expect(await gateway.api.counters(page)).toEqual({ unread: 0, other: 1 });
      // A reset counter is still there (at zero) and counts on.
      await gateway.api.change(page, "unread", 2);
      expect(await gateway.api.counters(page)).toEqual({ unread: 2, other: 1 });
    });

    test("reset - a retry with the same key answers the original, even after the value changed", async () => {
      const page = "reset-retry";
      await gateway.api.change(page, "unread", 4);
      const first = await gateway.api.reset(page, "unread", { idempotencyKey: "reset-key" });
      await gateway.api.change(page, "unread", 3);
      const retry = await gateway.api.reset(page, "unread", { idempotencyKey: "reset-key" });
      expect(retry.status).toBe(200);
      expect(retry.body).toEqual(first.body);
      expect(retry.headers.get("idempotent-replayed")).toBe("true");
      expect(await gateway.api.counters(page)).toEqual({ unread: 3 });
      // The key is the reset's: reused for an increment, or for a delete, it conflicts.
      const asIncrement = await gateway.api.change(page, "unread", 1, "reset-key");
      expect(asIncrement.status).toBe(409);
      expect(codeOf(asIncrement.body)).toBe("idempotency_conflict");
      const asDelete = await gateway.api.remove(page, "unread", { idempotencyKey: "reset-key" });
      expect(asDelete.status).toBe(409);
      expect(await gateway.api.counters(page)).toEqual({ unread: 3 });
    });
  });

  describe("deletes", () => {
    test("delete - hides the counter from reads, listings and count frames; a later increment revives it from zero", async () => {
      const page = "del-basic";
      await gateway.api.batch([
        { page, counter: "likes", change: 5, id: "d1" },
        { page, counter: "shares", change: 2, id: "d2" },
      ]);
      const watcher = await gateway.platform.watcher(page);
      await expect.poll(() => watcher.lastCount(page)?.counters).toEqual({ likes: 5, shares: 2 });

      const del = await gateway.api.remove(page, "likes", { idempotencyKey: "del-1" });
      expect(del.status).toBe(200);
      expect(del.body).toMatchObject({ page, counter: "likes", value: 0, previous: 5, deleted: true });
      expect(await gateway.api.counters(page)).toEqual({ shares: 2 });
      expect((await gateway.platform.counter(page)).counters).toEqual({ shares: 2 });
      await expect.poll(() => watcher.lastCount(page)?.counters).toEqual({ shares: 2 });
      const raw = await gateway.api.read<{ pages: PageRaw[] }>(`page=${page}&raw=true`);
      expect(Object.keys(raw.body.pages[0]!.counters)).toEqual(["shares"]);
      const listed = await gateway.api.read(`prefix=${page}`);
      expect(listed.body.pages[0]?.counters).toEqual({ shares: 2 });
      // A late watcher never sees it either.
      const late = await gateway.platform.watcher(page);
      expect(late.lastCount(page)?.counters).toEqual({ shares: 2 });

      const revived = await gateway.api.change(page, "likes", 1);
      expect(revived.body).toMatchObject({ value: 1 });
      expect(await gateway.api.counters(page)).toEqual({ likes: 1, shares: 2 });
      await expect.poll(() => watcher.lastCount(page)?.counters).toEqual({ likes: 1, shares: 2 });
      // Never an internal counter anywhere.
      for (const frame of watcher.received) {
        if (frame.frame.type === "count")
          expect(Object.keys(frame.frame.counters).some((k) => k.startsWith("@"))).toBe(false);
      }
    });

    test("delete - a decrement revives a deleted counter too, below zero", async () => {
      const page = "del-decrement";
      await gateway.api.change(page, "stock", 3);
      await gateway.api.remove(page, "stock");
      await gateway.api.change(page, "stock", -2);
      expect(await gateway.api.counters(page)).toEqual({ stock: -2 });
    });

    test("delete - is idempotent by key: a retry answers the original even after a revival; a new key deletes again", async () => {
      const page = "del-idem";
      await gateway.api.change(page, "likes", 4);
      const first = await gateway.api.remove(page, "likes", { idempotencyKey: "del-key" });
      await gateway.api.change(page, "likes", 2);
      const retry = await gateway.api.remove(page, "likes", { idempotencyKey: "del-key" });
      expect(retry.status).toBe(200);
      expect(retry.body).toEqual(first.body);
      expect(retry.headers.get("idempotent-replayed")).toBe("true");
      expect(await gateway.api.counters(page)).toEqual({ likes: 2 });
      const again = await gateway.api.remove(page, "likes", { idempotencyKey: "del-key-2" });
      expect(again.body).toMatchObject({ previous: 2, deleted: true });
      expect(await gateway.api.counters(page)).toEqual({});
      // Deleting what is already deleted changes nothing and hides nothing else.
      const twice = await gateway.api.remove(page, "likes", { idempotencyKey: "del-key-3" });
      expect(twice.body).toMatchObject({ previous: 0 });
      await gateway.api.change(page, "likes", 1);
      expect(await gateway.api.counters(page)).toEqual({ likes: 1 });
    });

    test("delete - a counter that never existed can be deleted and stays away until used", async () => {
      const page = "del-never";
      await gateway.api.change(page, "likes", 1);
      const res = await gateway.api.remove(page, "ghost");
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ previous: 0, deleted: true });
      expect(await gateway.api.counters(page)).toEqual({ likes: 1 });
      await gateway.api.change(page, "ghost", 3);
      expect(await gateway.api.counters(page)).toEqual({ likes: 1, ghost: 3 });
    });

    test("delete - a reset of a deleted counter keeps it hidden", async () => {
      const page = "del-then-reset";
      await gateway.api.change(page, "unread", 5);
      await gateway.api.remove(page, "unread");
      const reset = await gateway.api.reset(page, "unread");
      expect(reset.body).toMatchObject({ previous: 0 });
      expect(await gateway.api.counters(page)).toEqual({});
    });

    test("delete and reset - internal counter names and bad ids in the path are 400", async () => {
      const cases: ReadonlyArray<[string, string, string]> = [
        ["DELETE", "/v1/pages/p/counters/%40viewers", "invalid_counter"],
        ["DELETE", "/v1/pages/p/counters/%40del%3Alikes", "invalid_counter"],
        ["POST", "/v1/pages/p/counters/%40viewers/reset", "invalid_counter"],
        ["DELETE", `/v1/pages/p/counters/${"c".repeat(65)}`, "invalid_counter"],
        ["DELETE", "/v1/pages/p/counters/%zz", "invalid_counter"],
        ["DELETE", "/v1/pages/a%20b/counters/likes", "invalid_page"],
        ["POST", "/v1/pages/%zz/counters/likes/reset", "invalid_page"],
      ];
      for (const [method, path, code] of cases) {
        const res = await gateway.api.request(method, path);
        expect(res.status, `${method} ${path}`).toBe(400);
        expect(codeOf(res.body), `${method} ${path}`).toBe(code);
      }
      for (const idempotencyKey of ["k".repeat(129), ""]) {
        const badKey = await gateway.api.remove("p", "likes", { idempotencyKey });
        expect(badKey.status, `key of ${idempotencyKey.length}`).toBe(400);
        expect(codeOf(badKey.body)).toBe("invalid_idempotency_key");
      }
    });

    test("delete and reset - page ids with '/', '?', '%' and '#' work percent-encoded", async () => {
      const page = "a/b?c%d#e-del";
      await gateway.api.change(page, "likes", 2);
      expect((await gateway.api.reset(page, "likes")).body).toMatchObject({ page, previous: 2 });
      expect((await gateway.api.remove(page, "likes")).body).toMatchObject({ page, deleted: true });
      expect(await gateway.api.counters(page)).toEqual({});
    });
  });
});

/**
 * Increments (+1 each, three workers) race resets (some sent twice at once under one key). Every
 * increment's answer is its position in the run of increments since the last reset, so with one
 * owner applying everything in one order the answers are exactly the runs 1..previous of each
 * reset and 1..final after the last one: a reset that cancelled a stale value, or counted twice,
 * breaks the runs.
 */
async function raceResetsWithIncrements(api: PublisherHttp, page: string): Promise<void> {
  const random = mulberry32(testSeed(`reset race on ${page}`));
  const answers: number[] = [];
  const increments = async (worker: number): Promise<void> => {
    for (let i = 0; i < 80; i++) {
      const res = await api.change(page, "unread", 1, `inc-${worker}-${i}`);
      expect(res.status).toBe(200);
      answers.push((res.body as { value: number }).value);
    }
  };
  const resets = new Map<string, ResetBody>();
  const resetter = async (): Promise<void> => {
    for (let i = 0; i < 30; i++) {
      const key = `reset-${i}`;
      const sent = await Promise.all(
        Array.from({ length: random.chance(0.3) ? 2 : 1 }, () =>
          api.reset(page, "unread", { idempotencyKey: key }),
        ),
      );
      for (const a of sent) expect(a.status).toBe(200);
      expect(new Set(sent.map((a) => a.body.previous)).size).toBe(1);
      resets.set(key, sent[0]!.body);
      if (random.chance(0.5)) await new Promise((r) => setImmediate(r));
    }
  };
  await Promise.all([increments(1), increments(2), increments(3), resetter()]);
  const final = (await api.counters(page)).unread!;
  const runs = [...[...resets.values()].map((r) => r.previous), final];
  const expected = runs.flatMap((n) => Array.from({ length: n }, (_, i) => i + 1));
  const sort = (xs: number[]): number[] => [...xs].sort((a, b) => a - b);
  expect(answers).toHaveLength(3 * 80);
  expect(sort(answers)).toEqual(sort(expected));
  // The race did race: resets cancelled increments made between them.
  expect(runs.filter((n) => n > 0).length).toBeGreaterThan(5);
}

describe("gateway - resets racing increments", () => {
  test("reset - racing increments on the in-memory store: each reset cancels exactly the increments since the one before", async () => {
    const platform = await TestPlatform.start();
    try {
      await raceResetsWithIncrements(new PublisherHttp(platform.url, TEST_PUBLISHER_KEY), "race-memory");
    } finally {
      await platform.close();
    }
  });
});

describeWithRedis("gateway - resets racing increments on redis", () => {
  let redis: RedisServer;

  beforeAll(async () => {
    redis = await RedisServer.start();
  });

  afterAll(async () => {
    await redis?.stop();
  });

  test("reset - racing increments on redis: each reset cancels exactly the increments since the one before", async () => {
    const platform = await TestPlatform.start({ LIVECOUNT_REDIS_URL: redis.url });
    try {
      await raceResetsWithIncrements(new PublisherHttp(platform.url, TEST_PUBLISHER_KEY), "race-redis");
    } finally {
      await platform.close();
    }
  });
});
