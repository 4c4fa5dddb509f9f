/**
 * The SDK's single changes and reads against a real embedded gateway: values, exactly-once through
 * a link that loses answers, retries that reuse the key, and typed errors with the server's codes.
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import {
  AuthError,
  IdempotencyConflictError,
  InvalidRequestError,
  LivecountClient,
  LivecountError,
  NetworkError,
  RateLimitedError,
  UnavailableError,
} from "../src/index.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import type { LossyProxy } from "../../../test/support/lossy_proxy.js";
import { FaultProxy } from "./fault_proxy.js";
import { testClient, uniquePage, useGateway } from "./support.js";

/**
 * How long a try waits for its answer: the stalled tries wait it out. Longer than a stall of a
 * loaded host (this file runs at nice 19 in npm test), so a try that is answered is never retried.
 */
const TRY_MS = 1_500;

describe("sdk - changes and reads", () => {
  const fx = useGateway();
  const proxy = (): Promise<FaultProxy> => fx.proxy();
  const lossy = (label: string): Promise<LossyProxy> => fx.lossy(label);
  const client = (baseUrl: string, options: Parameters<typeof fx.client>[1] = {}): LivecountClient =>
    fx.client(baseUrl, options).client;

  test("sdk - increment, decrement and get report the values the server holds", async () => {
    const page = uniquePage("values");
    const c = client(fx.platform.url);
    expect(await c.increment(page, "likes")).toMatchObject({
      page,
      counter: "likes",
      value: 1,
      replayed: false,
    });
    expect(await c.increment(page, "likes", 4)).toMatchObject({ value: 5 });
    expect(await c.decrement(page, "likes", 2)).toMatchObject({ value: 3 });
    expect(await c.decrement(page, "claps")).toMatchObject({ counter: "claps", value: -1 });

    const read = await c.get(page);
    expect(read).toMatchObject({ page, viewers: 0, counters: { likes: 3, claps: -1 } });
    expect(read.updatedAt).toBeGreaterThan(Date.now() - 60_000);
    expect(await fx.platform.counter(page)).toMatchObject({ counters: { likes: 3, claps: -1 } });
  });

  test("sdk - page ids with '/', '?', '%' and '#' and a counter name with ':' go through", async () => {
    const page = `${uniquePage("odd")}/a?b%c#d`;
    const c = client(fx.platform.url);
    expect(await c.increment(page, "reaction:thumbs", 2)).toMatchObject({
      page,
      counter: "reaction:thumbs",
      value: 2,
    });
    expect((await c.get(page)).counters).toEqual({ "reaction:thumbs": 2 });
  });

  test("sdk - the same idempotency key counts once and the repeat is marked replayed", async () => {
    const page = uniquePage("key");
    const c = client(fx.platform.url);
    const first = await c.increment(page, "likes", 1, { idempotencyKey: "like:user-7:post-1" });
    const again = await c.increment(page, "likes", 1, { idempotencyKey: "like:user-7:post-1" });
    expect(first).toMatchObject({ value: 1, replayed: false });
    expect(again).toMatchObject({ value: 1, replayed: true, updatedAt: first.updatedAt });
    expect((await c.get(page)).counters.likes).toBe(1);
  });

  test("sdk - increments through a link that loses 30% of the answers count exactly once", async () => {
    const link = await lossy("sdk lossy increments");
    const page = uniquePage("lossy");
    const c = client(link.url);
    const N = 60;
    const values: number[] = [];
    let replayed = 0;
    for (let i = 0; i < N; i++) {
      const r = await c.increment(page, "likes");
      values.push(r.value);
      if (r.replayed) replayed++;
    }
    // Each call saw its own increment: 1, 2, ..., N. A lost answer comes back as the original one.
    expect(values).toEqual(Array.from({ length: N }, (_, i) => i + 1));
    expect(link.dropped).toBeGreaterThan(0);
    expect(replayed).toBeGreaterThan(0);
    expect(replayed).toBeLessThanOrEqual(link.dropped);
    expect((await fx.platform.counter(page)).counters.likes).toBe(N);
  });

  test("sdk - concurrent increments and decrements through the lossy link end exact", async () => {
    const link = await lossy("sdk lossy concurrent");
    const page = uniquePage("lossy-concurrent");
    const c = client(link.url);
    await Promise.all(
      Array.from({ length: 80 }, (_, i) =>
        i % 4 === 0 ? c.decrement(page, "score", 3) : c.increment(page, "score", 2),
      ),
    );
    expect(link.dropped).toBeGreaterThan(0);
    expect((await fx.platform.counter(page)).counters.score).toBe(60 * 2 - 20 * 3);
  });

  test("sdk - every try of a change carries the same Idempotency-Key", async () => {
    const p = await proxy();
    const page = uniquePage("same-key");
    const c = client(p.url, { timeoutMs: TRY_MS });
    p.respondNext(2, {
      status: 503,
      body: { error: { code: "unavailable", message: "failover" } },
      headers: { "retry-after": "0" },
    });
    p.stallNext(1);
    const r = await c.increment(page, "likes", 1, {});
    const puts = p.seen.filter((s) => s.method === "PUT");
    expect(puts.length).toBe(2 + 1 + 1);
    const keys = new Set(puts.map((s) => s.headers["idempotency-key"]));
    expect(keys.size).toBe(1);
    expect([...keys][0]).toMatch(/^[0-9a-f-]{36}$/);
    // The stalled try reached the server; the last one is its replay.
    expect(r).toMatchObject({ value: 1, replayed: true });
    expect((await fx.platform.counter(page)).counters.likes).toBe(1);
  });

  test("sdk - a try with no answer within timeoutMs is retried with the same key", async () => {
    const p = await proxy();
    const page = uniquePage("timeout");
    const c = client(p.url, { timeoutMs: TRY_MS });
    p.stallNext(2);
    const r = await c.increment(page, "likes", 5);
    expect(r).toMatchObject({ value: 5, replayed: true });
    expect(p.count("PUT")).toBe(3);
    expect((await fx.platform.counter(page)).counters.likes).toBe(5);
  });

  test("sdk - 429 rate_limited is retried after the server's Retry-After", async () => {
    const p = await proxy();
    const page = uniquePage("retry-after");
    const c = client(p.url);
    p.respondNext(1, {
      status: 429,
      body: { error: { code: "rate_limited", message: "slow down" } },
      headers: { "retry-after": "1" },
    });
    const started = Date.now();
    expect(await c.increment(page, "likes")).toMatchObject({ value: 1 });
    // A lower bound, not a performance assertion: the SDK must not come back sooner than asked.
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
    expect(p.count("PUT")).toBe(2);
  });

  test("sdk - retryable failures past the last try are typed, and resending with the key counts once", async () => {
    const p = await proxy();
    const page = uniquePage("exhausted");
    const retry = { attempts: 3, baseMs: 1, maxMs: 5 };
    const c = client(p.url, { retry });
    const key = "k-exhausted";
    const canned = (status: number, code: string) => ({
      status,
      body: { error: { code, message: code } },
      headers: { "retry-after": "0" },
    });

    p.respondNext(3, canned(503, "unavailable"));
    const unavailable = await c.increment(page, "likes", 1, { idempotencyKey: key }).catch((e: unknown) => e);
    expect(unavailable).toBeInstanceOf(UnavailableError);
    expect(unavailable).toMatchObject({ code: "unavailable", status: 503, retryable: true, page });
    expect(p.count("PUT")).toBe(3);

    p.respondNext(3, canned(429, "rate_limited"));
    const limited = await c.increment(page, "likes", 1, { idempotencyKey: key }).catch((e: unknown) => e);
    expect(limited).toBeInstanceOf(RateLimitedError);
    expect(limited).toMatchObject({ code: "rate_limited", status: 429, retryable: true, retryAfterMs: 0 });

    // Both tries reach the server (the first applies the change) but no answer comes back.
    p.stallNext(2);
    const slow = client(p.url, { retry: { attempts: 2, baseMs: 1, maxMs: 1 }, timeoutMs: 200 });
    const timedOut = await slow.increment(page, "likes", 1, { idempotencyKey: key }).catch((e: unknown) => e);
    expect(timedOut).toBeInstanceOf(NetworkError);
    expect(timedOut).toMatchObject({ code: "request_timeout", status: undefined, retryable: true });

    const refused = await client("http://127.0.0.1:1", { retry: { attempts: 2, baseMs: 1, maxMs: 1 } })
      .increment(page, "likes")
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(NetworkError);
    expect(refused).toMatchObject({ code: "network_error", status: undefined, retryable: true });

    // Whatever happened before, the same key now is the original answer: one like in all.
    expect(await c.increment(page, "likes", 1, { idempotencyKey: key })).toMatchObject({
      value: 1,
      replayed: true,
    });
    expect((await fx.platform.counter(page)).counters.likes).toBe(1);
  });

  test("sdk - 401 unauthorized is an AuthError, not retried", async () => {
    const p = await proxy();
    const page = uniquePage("auth");
    const wrong = client(p.url, { publisherKey: "not-the-key-0000" });
    const err = await wrong.increment(page, "likes").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AuthError);
    expect(err).toBeInstanceOf(LivecountError);
    expect(err).toMatchObject({
      name: "AuthError",
      code: "unauthorized",
      status: 401,
      retryable: false,
      page,
    });
    expect(p.count("PUT")).toBe(1);

    const keyless = new LivecountClient({ baseUrl: p.url, retry: { attempts: 5, baseMs: 1, maxMs: 1 } });
    fx.own(keyless);
    await expect(keyless.decrement(page, "likes")).rejects.toMatchObject({
      code: "unauthorized",
      status: 401,
    });
    // Reads need no key.
    expect(await keyless.get(page)).toMatchObject({ page, counters: {} });
    expect(p.count("PUT")).toBe(2);
  });

  test("sdk - 400 from the server is an InvalidRequestError with its code, not retried", async () => {
    const p = await proxy();
    const page = uniquePage("bad");
    const c = client(p.url);
    const err = await c.increment(page, "likes", 2_000_000_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidRequestError);
    expect(err).toMatchObject({ code: "invalid_body", status: 400, retryable: false });
    expect(p.count("PUT")).toBe(1);
    expect((await fx.platform.counter(page)).counters).toEqual({});
  });

  test("sdk - 409 idempotency_conflict: a key reused for another change", async () => {
    const page = uniquePage("conflict");
    const c = client(fx.platform.url);
    await c.increment(page, "likes", 1, { idempotencyKey: "k-conflict" });
    const err = await c
      .increment(page, "likes", 2, { idempotencyKey: "k-conflict" })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IdempotencyConflictError);
    expect(err).toMatchObject({ code: "idempotency_conflict", status: 409, retryable: false });
    expect((await c.get(page)).counters.likes).toBe(1);
  });

  test("sdk - invalid ids and amounts are refused before anything is sent, with the server's codes", async () => {
    const p = await proxy();
    const c = client(p.url);
    const cases: Array<[Promise<unknown>, string]> = [
      [c.increment("has space", "likes"), "invalid_page"],
      [c.increment("p".repeat(129), "likes"), "invalid_page"],
      [c.increment("ok", "no spaces"), "invalid_counter"],
      [c.increment("ok", "c".repeat(65)), "invalid_counter"],
      [c.increment("ok", "likes", 0), "invalid_body"],
      [c.decrement("ok", "likes", 1.5), "invalid_body"],
      [c.increment("ok", "likes", 1, { idempotencyKey: "with space" }), "invalid_idempotency_key"],
      [c.get("caf\u00e9"), "invalid_page"],
    ];
    for (const [promise, code] of cases) {
      const err = await promise.catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidRequestError);
      expect(err).toMatchObject({ code, status: 400, retryable: false });
    }
    expect(() => c.queue("ok", "bad name", 1)).toThrow(InvalidRequestError);
    expect(p.requests).toEqual([]);
  });

  test("sdk - a closed client refuses calls with client_closed", async () => {
    const c = new LivecountClient({ baseUrl: fx.platform.url, publisherKey: TEST_PUBLISHER_KEY });
    await c.close();
    await expect(c.increment("p", "likes")).rejects.toMatchObject({ code: "client_closed" });
    expect(() => c.queue("p", "likes", 1)).toThrow(/closed/);
  });

  test("sdk - a caller's AbortSignal stops retries", async () => {
    const p = await proxy();
    const c = client(p.url, { retry: { attempts: 50, baseMs: 50, maxMs: 50 } });
    p.respondNext(50, {
      status: 503,
      body: { error: { code: "unavailable", message: "x" } },
      headers: { "retry-after": "0" },
    });
    const controller = new AbortController();
    const pending = c.increment(uniquePage("abort"), "likes", 1, { signal: controller.signal });
    setTimeout(() => controller.abort(new Error("caller gave up")), 120);
    await expect(pending).rejects.toThrow("caller gave up");
    expect(p.count("PUT")).toBeLessThan(10);
  });
});

describe("sdk - against a gateway with a tight publisher rate limit", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({ LIVECOUNT_PUBLISHER_RATE: "2", LIVECOUNT_PUBLISHER_BURST: "2" });
  });

  afterAll(async () => {
    await platform.close();
  });

  test("sdk - the gateway's 429 is waited out as its Retry-After says, and every change counts once", async () => {
    const p = await FaultProxy.start(platform.app.port);
    const { client: c } = testClient(p.url);
    try {
      const page = uniquePage("rate");
      const started = Date.now();
      const values = await Promise.all(Array.from({ length: 4 }, () => c.increment(page, "likes")));
      // A burst of 2, then 2 per second: the last two wait for the server's Retry-After (>= 1 s).
      expect(Date.now() - started).toBeGreaterThanOrEqual(900);
      expect(values.map((v) => v.value).sort()).toEqual([1, 2, 3, 4]);
      expect(p.count("PUT")).toBeGreaterThan(4);
      expect((await platform.counter(page)).counters.likes).toBe(4);
    } finally {
      await c.close();
      await p.close();
    }
  });
});
