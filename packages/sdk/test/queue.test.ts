/**
 * Fire-and-forget changes against a real embedded gateway: nothing queued is lost, under load, over
 * a lossy link, or at close(), and coalescing sends far fewer requests than calls.
 */
import { describe, expect, test } from "vitest";
import { AuthError, PartialFailureError, QueueFullError, type LivecountClient } from "../src/index.js";
import { sleep } from "../../../test/support/eventually.js";
import type { LossyProxy } from "../../../test/support/lossy_proxy.js";
import type { FaultProxy } from "./fault_proxy.js";
import { uniquePage, useGateway } from "./support.js";

const BATCH = "POST /v1/counters/increment";

describe("sdk - fire-and-forget queue", () => {
  const fx = useGateway();
  const proxy = (): Promise<FaultProxy> => fx.proxy();
  const lossy = (label: string): Promise<LossyProxy> => fx.lossy(label);
  const client = fx.client;

  /** Sends `calls` queue() calls spread over 20 counters on 4 pages, a few windows long; returns the expected totals. */
  async function load(c: LivecountClient, label: string, calls: number): Promise<Map<string, number>> {
    const pages = Array.from({ length: 4 }, (_, i) => uniquePage(`${label}-${i}`));
    const expected = new Map<string, number>();
    for (let i = 0; i < calls; i++) {
      const page = pages[i % 4]!;
      const counter = `c${i % 5}`;
      // Mostly increments, some decrements, some bigger amounts.
      const change = i % 11 === 0 ? -1 : i % 13 === 0 ? 5 : 1;
      c.queue(page, counter, change);
      expected.set(`${page} ${counter}`, (expected.get(`${page} ${counter}`) ?? 0) + change);
      // Yield now and then so the calls span several coalescing windows, as real traffic would.
      if (i % 1000 === 999) await sleep(15);
    }
    return expected;
  }

  async function expectTotals(expected: Map<string, number>): Promise<void> {
    const byPage = new Map<string, Record<string, number>>();
    for (const [key, value] of expected) {
      const [page, counter] = key.split(" ") as [string, string];
      byPage.set(page, { ...byPage.get(page), [counter]: value });
    }
    for (const [page, counters] of byPage)
      expect((await fx.platform.counter(page)).counters).toEqual(counters);
  }

  test("sdk - 10k queue() calls across 20 counters lose nothing and take far fewer requests", async () => {
    const p = await proxy();
    const { client: c, errors } = client(p.url);
    const expected = await load(c, "load", 10_000);
    await c.flush();
    expect(c.pendingChanges).toBe(0);
    await expectTotals(expected);
    const batches = p.count(BATCH);
    console.log(`10000 queue() calls -> ${batches} batch requests`);
    expect(batches).toBeGreaterThan(0);
    expect(batches).toBeLessThanOrEqual(100);
    expect(p.requests.every((r) => r.startsWith(BATCH))).toBe(true);
    expect(errors).toEqual([]);
  });

  test("sdk - queued changes through a link that loses 30% of the answers land exactly once", async () => {
    const p = await lossy("sdk lossy queue");
    const { client: c, errors } = client(p.url, { queue: { windowMs: 10 } });
    // Each round is a handful of batches; keep going until the link has lost some answers, so the
    // test never passes without exercising a retry (30% per answer: 40 rounds miss with p < 1e-6).
    const expected = new Map<string, number>();
    for (let round = 0; round < 40 && p.dropped === 0; round++) {
      for (const [key, value] of await load(c, `lossy-queue-${round}`, 1_000)) expected.set(key, value);
      await c.flush();
    }
    expect(p.dropped).toBeGreaterThan(0);
    await expectTotals(expected);
    expect(errors).toEqual([]);
  });

  test("sdk - close() right after queue() loses nothing", async () => {
    const p = await proxy();
    const { client: c, errors } = client(p.url, { queue: { windowMs: 60_000 } });
    const page = uniquePage("close");
    for (let i = 0; i < 500; i++) c.queue(page, i % 2 === 0 ? "likes" : "reaction:heart", 1);
    c.queue(page, "unread", 3);
    // The window is a minute long: only close() can have sent these.
    await c.close();
    expect((await fx.platform.counter(page)).counters).toEqual({
      likes: 250,
      "reaction:heart": 250,
      unread: 3,
    });
    expect(p.count(BATCH)).toBe(1);
    expect(() => c.queue(page, "likes", 1)).toThrow(/closed/);
    expect(errors).toEqual([]);
  });

  test("sdk - deltas that cancel out send nothing, and flush() of an empty queue resolves at once", async () => {
    const p = await proxy();
    const { client: c } = client(p.url);
    const page = uniquePage("cancel");
    c.queue(page, "likes", 3);
    c.queue(page, "likes", -3);
    c.queue(page, "likes", 0);
    await c.flush();
    await c.flush();
    expect(p.requests).toEqual([]);
  });

  test("sdk - a full queue throws QueueFullError and takes more once flushed", async () => {
    const { client: c } = client(fx.platform.url, { queue: { maxPendingItems: 3, windowMs: 60_000 } });
    const page = uniquePage("full");
    c.queue(page, "a", 1);
    c.queue(page, "b", 1);
    c.queue(page, "c", 1);
    // More of a counter already queued coalesces: no new item, no error.
    c.queue(page, "a", 1);
    expect(() => c.queue(page, "d", 1)).toThrow(QueueFullError);
    expect(c.pendingChanges).toBe(3);
    await c.flush();
    c.queue(page, "d", 1);
    await c.flush();
    expect((await fx.platform.counter(page)).counters).toEqual({ a: 2, b: 1, c: 1, d: 1 });
  });

  test("sdk - queued changes that fail for good go to onError and reject flush(), with their keys", async () => {
    const { client: c, errors } = client(fx.platform.url, { publisherKey: "wrong-key-0000" });
    const page = uniquePage("fail");
    c.queue(page, "likes", 2);
    c.queue(page, "claps", -1);
    const err = await c.flush().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PartialFailureError);
    const failed = (err as PartialFailureError).failed;
    expect(failed.map((f) => [f.item.counter, f.item.change]).sort()).toEqual([
      ["claps", -1],
      ["likes", 2],
    ]);
    for (const f of failed) {
      expect(f.error).toBeInstanceOf(AuthError);
      expect(f.item.id).toMatch(/^[0-9a-f-]{36}$/);
    }
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(PartialFailureError);
    // Reported once: the next flush has nothing to report.
    await c.flush();

    // Sent again with their keys (here twice), they count exactly once.
    const { client: good } = client(fx.platform.url);
    const items = failed.map((f) => f.item);
    await good.incrementMany(items);
    const again = await good.incrementMany(items);
    expect(again.every((r) => r.replayed)).toBe(true);
    expect((await fx.platform.counter(page)).counters).toEqual({ likes: 2, claps: -1 });
  });
});
