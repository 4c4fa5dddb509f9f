/**
 * What a key buys over HTTP: `/metrics` and prefix listings need the admin key (a publisher key
 * also lists), a batch costs its publisher key one rate token per item, and reads without a key
 * spend their address's budget, one token per page, in a map that rotating addresses cannot grow.
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { AddressRateLimiter } from "../src/rate_limits.js";
import { sleep } from "../../../test/support/eventually.js";
import { TEST_ADMIN_KEY, TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";

/** The publisher key's burst: room under a batch's 1,000 items for the tokens that come back. */
const BURST = 500;
const bearer = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` });

describe("gateway - keys over HTTP", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_PUBLISHER_RATE: "1",
      LIVECOUNT_PUBLISHER_BURST: String(BURST),
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("metrics - 401 without the admin key or with a publisher key, 200 with the admin key", async () => {
    const url = `${platform.url}/metrics`;
    expect((await fetch(url)).status).toBe(401);
    expect((await fetch(url, { headers: bearer(TEST_PUBLISHER_KEY) })).status).toBe(401);
    expect((await fetch(url, { headers: bearer(`${TEST_ADMIN_KEY}x`) })).status).toBe(401);
    const ok = await fetch(url, { headers: bearer(TEST_ADMIN_KEY) });
    expect(ok.status).toBe(200);
    expect(await ok.text()).toContain("livecount_gateway_sockets");
  });

  test("listing - a prefix listing is 401 without a key, 200 with the admin or a publisher key", async () => {
    const url = `${platform.url}/v1/counters?prefix=`;
    const anonymous = await fetch(url);
    expect(anonymous.status).toBe(401);
    expect(await anonymous.json()).toMatchObject({ error: { code: "unauthorized" } });
    expect((await fetch(url, { headers: bearer("not-a-known-key-123") })).status).toBe(401);
    expect((await fetch(url, { headers: bearer(TEST_ADMIN_KEY) })).status).toBe(200);
    expect((await fetch(url, { headers: bearer(TEST_PUBLISHER_KEY) })).status).toBe(200);
    // Reading named pages stays public.
    expect((await fetch(`${platform.url}/v1/counters?page=listing-public`)).status).toBe(200);
  });

  test("batch - costs one rate token per item, the first taken before the body: a batch of more items than tokens left is 429, applies nothing and costs one", async () => {
    const post = (items: unknown[]): Promise<Response> =>
      fetch(`${platform.url}/v1/counters/increment`, {
        method: "POST",
        headers: { ...bearer(TEST_PUBLISHER_KEY), "content-type": "application/json" },
        body: JSON.stringify(items),
      });
    const item = (i: number, page = "batch-cost"): unknown => ({
      page,
      counter: "likes",
      change: 1,
      id: `bc-${i}`,
    });
    // The key's tokens come back at one a second (LIVECOUNT_PUBLISHER_RATE): on a loaded machine
    // some may between two requests, so each batch that must be refused has one item more than the
    // tokens left could be by then (the seconds since the spending request was sent, and one more
    // for the request's own way to the gateway).
    const since = (at: number): number => Math.ceil((performance.now() - at) / 1000) + 1;
    // A first batch of 100 leaves 400 of the burst; a batch is never larger than the burst (413).
    const FIRST = 100;
    let spentAt = performance.now();
    expect(
      (await post(Array.from({ length: FIRST }, (_, i) => item(-1 - i, "batch-cost-first")))).status,
    ).toBe(200);
    const refused = await post(Array.from({ length: BURST - FIRST + since(spentAt) + 1 }, (_, i) => item(i)));
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(await refused.json()).toMatchObject({ error: { code: "rate_limited" } });
    expect((await platform.counter("batch-cost")).counters.likes).toBeUndefined();
    // The refused batch spent its request's token. At the limit: 399 items take the 399 tokens left
    // (and none that came back since).
    spentAt = performance.now();
    const fits = await post(Array.from({ length: BURST - FIRST - 1 }, (_, i) => item(i)));
    expect(fits.status).toBe(200);
    expect((await platform.counter("batch-cost")).counters.likes).toBe(BURST - FIRST - 1);
    expect((await post(Array.from({ length: since(spentAt) + 1 }, (_, i) => item(5000 + i)))).status).toBe(
      429,
    );
  });
});

describe("gateway - a publisher key's refused batches", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({ LIVECOUNT_PUBLISHER_RATE: "1", LIVECOUNT_PUBLISHER_BURST: "2" });
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("batch - a body refused (malformed, too large) still costs the request's token: past the burst, 429 before the body is read", async () => {
    const post = (body: string): Promise<Response> =>
      fetch(`${platform.url}/v1/counters/increment`, {
        method: "POST",
        headers: { ...bearer(TEST_PUBLISHER_KEY), "content-type": "application/json" },
        body,
      });
    expect((await post("not json")).status).toBe(400);
    expect((await post(`[${" ".repeat(1024 * 1024)}]`)).status).toBe(413);
    // Both tokens spent: of five more, at most the tokens that came back meanwhile (one a second)
    // are read; the rest are refused for rate, before their bodies.
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push((await post("not json")).status);
    expect(statuses).toContain(429);
  });
});

describe("gateway - a publisher key's batch refused for rate", () => {
  const RATE = 2;
  const KEY_BURST = 10;
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_PUBLISHER_RATE: String(RATE),
      LIVECOUNT_PUBLISHER_BURST: String(KEY_BURST),
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  const post = (items: unknown[]): Promise<Response> =>
    fetch(`${platform.url}/v1/counters/increment`, {
      method: "POST",
      headers: { ...bearer(TEST_PUBLISHER_KEY), "content-type": "application/json" },
      body: JSON.stringify(items),
    });
  const batch = (n: number, from: number): unknown[] =>
    Array.from({ length: n }, (_, i) => ({
      page: "batch-wait",
      counter: "likes",
      change: 1,
      id: `bw-${from + i}`,
    }));

  test("batch - its Retry-After is the wait for the whole batch: retried after it, the same batch is applied", async () => {
    expect((await post(batch(5, 0))).status).toBe(200);
    // Five tokens left (and what came back): nine items do not fit; its first token is spent.
    const refused = await post(batch(9, 100));
    expect(refused.status).toBe(429);
    const waitS = Number(refused.headers.get("retry-after"));
    await sleep(waitS * 1000);
    expect((await post(batch(9, 100))).status).toBe(200);
    expect((await platform.counter("batch-wait")).counters.likes).toBe(14);
  });

  test("batch - more items than the key's burst could ever hold is 413 payload_too_large, not a wait", async () => {
    const res = await post(batch(KEY_BURST + 1, 1000));
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({ error: { code: "payload_too_large" } });
  });
});

describe("gateway - read budget per address", () => {
  let platform: TestPlatform;
  const BURST = 5;

  beforeAll(async () => {
    platform = await TestPlatform.start({ LIVECOUNT_READ_RATE: "1", LIVECOUNT_READ_BURST: String(BURST) });
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("reads - an address spends one token per page read; past its burst 429; keyed reads and other addresses go on", async () => {
    const read = (query: string, headers: Record<string, string> = {}): Promise<Response> =>
      fetch(`${platform.url}/v1/counters?${query}`, { headers });
    // Four pages at once cost four tokens, one more read the fifth: the burst, exactly.
    expect((await read("page=r1&page=r2&page=r3&page=r4")).status).toBe(200);
    expect((await fetch(`${platform.url}/v1/pages/r5/counter`)).status).toBe(200);
    const over = await fetch(`${platform.url}/v1/pages/r5/counter`);
    expect(over.status).toBe(429);
    expect(over.headers.get("retry-after")).toBe("1");
    expect(await over.json()).toMatchObject({ error: { code: "rate_limited" } });
    expect((await read("page=r1", bearer(TEST_PUBLISHER_KEY))).status).toBe(200);
    expect((await read("page=r1", bearer(TEST_ADMIN_KEY))).status).toBe(200);
    // Writes are not reads: the publisher's own budget applies to them.
    const put = await fetch(`${platform.url}/v1/pages/r5/counter`, {
      method: "PUT",
      headers: { ...bearer(TEST_PUBLISHER_KEY), "content-type": "application/json" },
      body: JSON.stringify({ action: "increment", counter: "likes" }),
    });
    expect(put.status).toBe(200);
  });

  test("reads - the per-address map is bounded: rotating addresses evict the least recent, memory stays put", () => {
    let now = 0;
    const limiter = new AddressRateLimiter({
      ratePerS: 1,
      burst: 2,
      maxAddresses: 100,
      now: () => now,
      what: "reads",
    });
    for (let i = 0; i < 10_000; i++) limiter.take(`198.51.${(i >> 8) & 255}.${i & 255}`, 1);
    expect(limiter.size).toBe(100);
    limiter.take("203.0.113.7", 2);
    expect(() => limiter.take("203.0.113.7", 1)).toThrow(/too many reads/);
    now += 1000;
    limiter.take("203.0.113.7", 1);
  });
});
