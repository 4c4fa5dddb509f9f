/**
 * The SDK over the rest of the counter API against a real embedded gateway: batches, reads of many
 * pages (summed and raw), prefix listings with cursors, resets and tombstones.
 */
import { describe, expect, test } from "vitest";
import { eventually } from "../../../test/support/eventually.js";
import { InvalidRequestError, PartialFailureError, type LivecountClient } from "../src/index.js";
import type { LossyProxy } from "../../../test/support/lossy_proxy.js";
import type { FaultProxy } from "./fault_proxy.js";
import { uniquePage, useGateway } from "./support.js";

describe("sdk - counter API", () => {
  const fx = useGateway();
  const proxy = (): Promise<FaultProxy> => fx.proxy();
  const lossy = (label: string): Promise<LossyProxy> => fx.lossy(label);
  const client = (baseUrl: string, options: Parameters<typeof fx.client>[1] = {}): LivecountClient =>
    fx.client(baseUrl, options).client;

  test("sdk - incrementMany applies every item and answers each in order", async () => {
    const p = await proxy();
    const c = client(p.url);
    const a = uniquePage("many-a");
    const b = uniquePage("many-b");
    const results = await c.incrementMany([
      { page: a, counter: "likes", change: 3 },
      { page: b, counter: "likes", change: 1 },
      { page: a, counter: "likes", change: -1 },
      { page: a, counter: "reaction:party", change: 7, id: "party-1" },
    ]);
    expect(results.map((r) => [r.page, r.counter, r.value])).toEqual([
      [a, "likes", 3],
      [b, "likes", 1],
      [a, "likes", 2],
      [a, "reaction:party", 7],
    ]);
    expect(p.count("POST /v1/counters/increment")).toBe(1);
    expect((await c.get(a)).counters).toEqual({ likes: 2, "reaction:party": 7 });
  });

  test("sdk - incrementMany splits big batches and a repeated id counts once", async () => {
    const p = await proxy();
    const c = client(p.url, { queue: { maxBatchItems: 50 } });
    const page = uniquePage("split");
    const items = Array.from({ length: 120 }, (_, i) => ({
      page,
      counter: "likes",
      change: 1,
      id: `split-${i}`,
    }));
    await c.incrementMany(items);
    expect(p.count("POST /v1/counters/increment")).toBe(3);
    const again = await c.incrementMany(items.slice(0, 10));
    expect(again.every((r) => r.replayed)).toBe(true);
    expect((await c.get(page)).counters.likes).toBe(120);
  });

  test("sdk - incrementMany through a link that loses 30% of the answers counts every item once", async () => {
    const p = await lossy("sdk lossy batches");
    const c = client(p.url);
    const page = uniquePage("lossy-many");
    for (let round = 0; round < 20; round++)
      await c.incrementMany(
        Array.from({ length: 10 }, (_, i) => ({ page, counter: `c${i % 3}`, change: 1 })),
      );
    expect(p.dropped).toBeGreaterThan(0);
    expect((await fx.platform.counter(page)).counters).toEqual({ c0: 80, c1: 60, c2: 60 });
  });

  test("sdk - incrementMany rejects bad items before sending; a failing item is a PartialFailureError", async () => {
    const p = await proxy();
    const c = client(p.url);
    const page = uniquePage("bad-many");
    for (const bad of [
      { page: "has space", counter: "likes", change: 1 },
      { page, counter: "bad name", change: 1 },
      { page, counter: "likes", change: 0 },
      { page, counter: "likes", change: 2_000_000_000 },
    ])
      await expect(c.incrementMany([{ page, counter: "likes", change: 1 }, bad])).rejects.toBeInstanceOf(
        InvalidRequestError,
      );
    expect(p.requests).toEqual([]);

    // Same id, another change: the server fails that item alone.
    await c.incrementMany([{ page, counter: "likes", change: 1, id: "used" }]);
    const err = await c
      .incrementMany([
        { page, counter: "likes", change: 5, id: "used" },
        { page, counter: "claps", change: 1, id: "fresh" },
      ])
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PartialFailureError);
    const failed = (err as PartialFailureError).failed;
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ item: { id: "used" }, error: { code: "idempotency_conflict" } });
    expect((await c.get(page)).counters).toEqual({ likes: 1, claps: 1 });
  });

  test("sdk - getMany reads several pages at once, summed", async () => {
    const c = client(fx.platform.url);
    const pages = Array.from({ length: 3 }, (_, i) => uniquePage(`get-many-${i}`));
    await c.increment(pages[0]!, "likes", 2);
    await c.decrement(pages[1]!, "likes", 1);
    const read = await c.getMany([...pages, pages[0]!]);
    expect([...read.keys()].sort()).toEqual([...pages].sort());
    // With the data centers the values come from: one here, so nothing stale.
    expect(read.get(pages[0]!)).toMatchObject({
      page: pages[0],
      viewers: 0,
      counters: { likes: 2 },
      dcs: ["dc1"],
      lagMs: 0,
    });
    expect(await c.get(pages[0]!)).toMatchObject({ counters: { likes: 2 }, dcs: ["dc1"], lagMs: 0 });
    expect(read.get(pages[1]!)?.counters).toEqual({ likes: -1 });
    expect(read.get(pages[2]!)?.counters).toEqual({});
  });

  test("sdk - getMany of more pages than one request holds splits them", async () => {
    const p = await proxy();
    const c = client(p.url);
    const pages = Array.from({ length: 230 }, (_, i) => `${uniquePage("wide")}-${i}`);
    await c.increment(pages[229]!, "likes");
    const read = await c.getMany(pages);
    expect(read.size).toBe(230);
    expect(read.get(pages[229]!)?.counters).toEqual({ likes: 1 });
    expect(p.count("GET /v1/counters?")).toBeGreaterThanOrEqual(3);
  });

  test("sdk - window sums a counter's recent changes; a reset is no change; bad seconds never leave the client", async () => {
    const c = client(fx.platform.url);
    const page = uniquePage("window");
    await c.increment(page, "likes", 5);
    await c.decrement(page, "likes", 2);
    await c.reset(page, "likes");
    await c.increment(page, "likes", 1);
    const w = await c.window(page, "likes", 300);
    expect(w).toMatchObject({ page, counter: "likes", seconds: 300, value: 4 });
    expect(w.updatedAt).toBeGreaterThan(0);
    expect((await c.get(page)).counters).toEqual({ likes: 1 });
    expect((await c.window(page, "claps", 60)).value).toBe(0);
    for (const bad of [0, 86_401, 1.5]) await expect(c.window(page, "likes", bad)).rejects.toThrow(/seconds/);
  });

  test("sdk - stats reads viewers, peaks and unique visitors", async () => {
    const c = client(fx.platform.url);
    const page = uniquePage("stats");
    const viewer = await fx.platform.connect();
    viewer.join(page, "sdk-stats-viewer");
    await fx.platform.waitForViewers(page, 1);
    await eventually(async () =>
      expect(await c.stats(page)).toMatchObject({
        page,
        viewers: 1,
        active: 1,
        connections: 1,
        peakViewers: { "1h": 1, "24h": 1 },
        uniqueVisitors: { "24h": 1 },
      }),
    );
  });

  test("sdk - getRaw shows each data center's {p, n}", async () => {
    const c = client(fx.platform.url);
    const page = uniquePage("raw");
    await c.increment(page, "likes", 5);
    await c.decrement(page, "likes", 2);
    const raw = (await c.getRaw([page])).get(page);
    expect(raw?.counters).toEqual({ likes: { dc1: { p: 5, n: 2 } } });
    expect(raw?.updatedAt).toBeGreaterThan(0);
  });

  test("sdk - list pages by prefix with a cursor, and listAll walks every page", async () => {
    const c = client(fx.platform.url);
    const prefix = `${uniquePage("list")}-`;
    const ids = Array.from({ length: 25 }, (_, i) => `${prefix}${String(i).padStart(2, "0")}`);
    await c.incrementMany(ids.map((page, i) => ({ page, counter: "likes", change: i + 1 })));
    await c.increment(`${prefix.slice(0, -1)}`, "likes"); // shares the prefix but for its last character

    const first = await c.list(prefix, { limit: 10 });
    expect(first.pages.map((p) => p.page)).toEqual(ids.slice(0, 10));
    expect(first.cursor).toBeDefined();
    const second = await c.list(prefix, { limit: 10, cursor: first.cursor! });
    expect(second.pages.map((p) => p.page)).toEqual(ids.slice(10, 20));

    const all: Array<[string, number | undefined]> = [];
    for await (const p of c.listAll(prefix, { limit: 7 })) all.push([p.page, p.counters.likes]);
    expect(all).toEqual(ids.map((id, i) => [id, i + 1]));
    expect((await c.list(`${prefix}zz`)).pages).toEqual([]);
  });

  test("sdk - reset zeroes an unread counter exactly once; later increments count from zero", async () => {
    const p = await proxy();
    const c = client(p.url);
    const page = uniquePage("unread");
    await c.increment(page, "unread", 4);
    p.stallNext(1);
    const slow = client(p.url, { timeoutMs: 300 });
    const reset = await slow.reset(page, "unread");
    // The stalled try reset the counter; its retry is the replay, not a second reset.
    expect(reset).toMatchObject({ page, counter: "unread", value: 0, previous: 4, replayed: true });
    expect((await c.get(page)).counters.unread ?? 0).toBe(0);
    expect(await c.increment(page, "unread")).toMatchObject({ value: 1 });
    const again = await c.reset(page, "unread", { idempotencyKey: "read-1" });
    expect(again).toMatchObject({ previous: 1, replayed: false });
    await c.increment(page, "unread", 2);
    // The same key again is the original answer: the two new unread survive.
    expect(await c.reset(page, "unread", { idempotencyKey: "read-1" })).toMatchObject({
      previous: 1,
      replayed: true,
    });
    expect((await c.get(page)).counters.unread).toBe(2);
  });

  test("sdk - delete tombstones a counter: gone from reads and listings until it counts again", async () => {
    const c = client(fx.platform.url);
    const page = uniquePage("delete");
    await c.increment(page, "likes", 3);
    await c.increment(page, "claps", 1);
    expect(await c.delete(page, "likes")).toMatchObject({ page, counter: "likes", value: 0, previous: 3 });
    expect((await c.get(page)).counters).toEqual({ claps: 1 });
    expect((await c.getMany([page])).get(page)?.counters).toEqual({ claps: 1 });
    expect(await c.increment(page, "likes")).toMatchObject({ value: 1 });
    expect((await c.get(page)).counters).toEqual({ claps: 1, likes: 1 });
  });
});
