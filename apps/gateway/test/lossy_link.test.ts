/**
 * Exactly-once over a lossy link: plain HTTP clients reach a real gateway through a TCP proxy that
 * drops a share of the responses after the server answered (test/support/lossy_proxy.ts), and
 * retry with the same idempotency key until they get an answer. Nothing may count twice, nothing
 * may be lost, and a retry of a change the server already made must be answered as a replay.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import { LossyProxy } from "../../../test/support/lossy_proxy.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { mulberry32, testSeed, type Random } from "../../../test/support/prng.js";
import {
  PublisherHttp,
  retrying,
  type BatchItem,
  type HttpAnswer,
} from "../../../test/support/publisher_http.js";

const DROP_SHARE = 0.3;
const WORKERS = 8;

/** Resolves only with a 2xx answer: network failures and 5xx are retried with the same request. */
async function untilAnswered<T>(
  call: () => Promise<HttpAnswer<T>>,
): Promise<{ answer: HttpAnswer<T>; tries: number }> {
  const { value, tries } = await retrying(async () => {
    const answer = await call();
    if (answer.status >= 500) throw new Error(`retryable ${answer.status}`);
    return answer;
  }, 100);
  expect(value.status, JSON.stringify(value.body)).toBe(200);
  return { answer: value, tries };
}

async function inParallel<T>(
  items: readonly T[],
  workers: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (next < items.length) await work(items[next++]!);
    }),
  );
}

describe("gateway - exactly once over a lossy link", () => {
  let platform: TestPlatform;
  let proxy: LossyProxy;
  let random: Random;
  let lossy: PublisherHttp;
  let direct: PublisherHttp;

  beforeAll(async () => {
    platform = await TestPlatform.start();
    random = mulberry32(testSeed("lossy link"));
    proxy = await LossyProxy.start(
      { host: "127.0.0.1", port: platform.app.port },
      { dropShare: DROP_SHARE, random: () => random.next() },
    );
    lossy = new PublisherHttp(proxy.url, TEST_PUBLISHER_KEY);
    direct = new PublisherHttp(platform.url, TEST_PUBLISHER_KEY);
  });

  afterEach(() => {
    proxy.dropShare = DROP_SHARE;
  });

  afterAll(async () => {
    await proxy?.close();
    await platform?.close();
  });

  test("lossy - PUT increments retried after lost responses count once each, and every retry is a replay", async () => {
    const page = "lossy-put";
    const changes = Array.from({ length: 200 }, (_, i) => ({ key: `put-${i}`, by: 1 + random.int(5) }));
    const droppedBefore = proxy.dropped;
    let retried = 0;
    await inParallel(changes, WORKERS, async ({ key, by }) => {
      const { answer, tries } = await untilAnswered(() => lossy.change(page, "likes", by, key));
      // The server made the change before the proxy dropped its answer: a retry is always a replay.
      expect(answer.headers.get("idempotent-replayed"), key).toBe(tries > 1 ? "true" : null);
      if (tries > 1) retried++;
    });
    expect(proxy.dropped - droppedBefore).toBeGreaterThan(20);
    expect(retried).toBeGreaterThan(20);
    expect(await direct.counters(page)).toEqual({ likes: changes.reduce((sum, c) => sum + c.by, 0) });
  });

  test("lossy - batches retried after lost responses count each id once, across batches too", async () => {
    const page = "lossy-batch";
    // Ids overlap between neighbouring batches: a duplicate across batches counts once.
    const ids = Array.from({ length: 400 }, (_, i) => ({
      id: `b-${i}`,
      change: random.chance(0.2) ? -1 : 1 + random.int(3),
    }));
    const batches: BatchItem[][] = [];
    for (let start = 0; start < ids.length; start += 30) {
      batches.push(
        ids.slice(Math.max(0, start - 5), start + 30).map(({ id, change }) => ({
          page: `${page}-${Number(id.slice(2)) % 4}`,
          counter: "reactions",
          change,
          id,
        })),
      );
    }
    let retried = 0;
    // However the draws fall, at least one batch's answer is lost, so the retry path always runs.
    proxy.dropNext = 1;
    await inParallel(batches, WORKERS, async (batch) => {
      const { answer, tries } = await untilAnswered(() => lossy.batch(batch));
      expect(answer.body.results).toHaveLength(batch.length);
      for (const r of answer.body.results) expect("value" in r, JSON.stringify(r)).toBe(true);
      if (tries > 1) {
        retried++;
        expect(answer.body.results.every((r) => "duplicate" in r && r.duplicate)).toBe(true);
      }
    });
    expect(retried).toBeGreaterThan(0);
    const expected = [0, 0, 0, 0];
    for (const { id, change } of ids) expected[Number(id.slice(2)) % 4]! += change;
    const totals = await direct.totals(...[0, 1, 2, 3].map((i) => `${page}-${i}`));
    expect(totals.map((t) => t.counters.reactions)).toEqual(expected);
  });

  test("lossy - resets and deletes retried after lost responses apply once and answer the original", async () => {
    proxy.dropShare = 0.5;
    const pages = Array.from({ length: 40 }, (_, i) => `lossy-reset-${i}`);
    for (const [i, page] of pages.entries()) {
      await direct.change(page, "unread", i + 1, `seed-${i}`);
      await direct.change(page, "likes", 2 * i + 1, `seed-likes-${i}`);
    }
    let retried = 0;
    await inParallel(pages, WORKERS, async (page) => {
      const i = pages.indexOf(page);
      const reset = await untilAnswered(() =>
        lossy.reset(page, "unread", { idempotencyKey: `reset-${page}` }),
      );
      expect(reset.answer.body).toMatchObject({ previous: i + 1, value: 0 });
      const del = await untilAnswered(() => lossy.remove(page, "likes", { idempotencyKey: `del-${page}` }));
      expect(del.answer.body).toMatchObject({ previous: 2 * i + 1, deleted: true });
      for (const { answer, tries } of [reset, del]) {
        expect(answer.headers.get("idempotent-replayed")).toBe(tries > 1 ? "true" : null);
        if (tries > 1) retried++;
      }
      // Counting goes on after both: a revived counter starts from zero.
      await untilAnswered(() => lossy.change(page, "unread", 1, `after-${page}`));
      await untilAnswered(() => lossy.change(page, "likes", 1, `revive-${page}`));
    });
    expect(retried).toBeGreaterThan(5);
    for (const totals of await direct.totals(...pages))
      expect(totals.counters).toEqual({ unread: 1, likes: 1 });
  });
});
