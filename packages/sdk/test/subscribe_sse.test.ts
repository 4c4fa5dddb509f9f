/**
 * Live values over Server-Sent Events (`transport: "sse"`) against a real embedded gateway, read
 * over fetch as on Node (no EventSource; the browser test covers EventSource): updates arrive, a
 * page's subscriptions share one stream, a cut, silent, refused or restarted stream comes back.
 */
import { describe, expect, test } from "vitest";
import {
  AuthError,
  LivecountError,
  RateLimitedError,
  signJoinToken,
  type LivecountClientOptions,
} from "../src/index.js";
import { eventually, sleep } from "../../../test/support/eventually.js";
import { LinkProxy } from "../../../test/support/link_proxy.js";
import { TestPlatform } from "../../../test/support/platform.js";
import { recorder, testClient, uniquePage, useGateway } from "./support.js";

const SECRET = "sdk-sse-test-secret-0123456789abcdef";
const HEARTBEAT_S = 1;
const RECONNECT_MAX_MS = 200;
const SSE: Partial<LivecountClientOptions> = {
  transport: "sse",
  reconnect: { baseMs: 20, maxMs: RECONNECT_MAX_MS },
};

describe("sdk - subscribe over event streams", () => {
  const fx = useGateway(SSE, {
    LIVECOUNT_SSE_HEARTBEAT_S: String(HEARTBEAT_S),
    LIVECOUNT_PRIVATE_PREFIXES: "user-",
    LIVECOUNT_JOIN_SECRET: SECRET,
  });
  const streamsOf = (p: { requests: string[] }, page: string): number =>
    p.requests.filter((r) => r.startsWith(`GET /v1/pages/${page}/events`)).length;

  test("sse - a subscriber gets the current value, then every change; a page's subscriptions share one stream", async () => {
    const p = await fx.proxy();
    const { client: c } = fx.client(p.url);
    const writer = fx.client(fx.platform.url).client;
    const page = uniquePage("sse-live");
    await writer.increment(page, "likes", 2);
    const first = recorder();
    const second = recorder();
    const off = c.subscribe(page, first.listener);
    c.subscribe(page, second.listener);
    await eventually(() => expect(first.last()).toMatchObject({ page, viewers: 0, counters: { likes: 2 } }));
    await writer.increment(page, "likes");
    await eventually(() => expect(second.last()?.counters.likes).toBe(3));
    expect(first.last()?.counters.likes).toBe(3);
    expect(c.connects).toBe(1);
    expect(streamsOf(p, page)).toBe(1);
    // A stream watches: it never counts as a viewer; and join needs the WebSocket.
    expect((await fx.platform.counter(page)).viewers).toBe(0);
    expect(() => c.subscribe(page, () => {}, { mode: "join" })).toThrow(LivecountError);

    off();
    const seen = first.updates.length;
    await writer.increment(page, "likes");
    await eventually(() => expect(second.last()?.counters.likes).toBe(4));
    expect(first.updates.length).toBe(seen);
  });

  test("sse - the last unsubscribe closes the page's stream on the gateway", async () => {
    const streams = (): number => fx.platform.app.gateway.eventStreams.open;
    // The streams of the tests before have gone with their clients.
    await eventually(() => expect(streams()).toBe(0));
    const { client: c } = fx.client(fx.platform.url);
    const r = recorder();
    const page = uniquePage("sse-off");
    const offs = [c.subscribe(page, r.listener), c.subscribe(page, () => {})];
    await eventually(() => expect(r.last()).toBeDefined());
    expect(streams()).toBe(1);
    offs[0]!();
    expect(streams()).toBe(1);
    offs[1]!();
    await eventually(() => expect(streams()).toBe(0));
  });

  test("sse - a cut stream reconnects with backoff and keeps delivering", async () => {
    const p = await fx.proxy();
    const { client: c } = fx.client(p.url);
    const writer = fx.client(fx.platform.url).client;
    const page = uniquePage("sse-cut");
    const r = recorder();
    c.subscribe(page, r.listener);
    await eventually(() => expect(r.last()).toBeDefined());
    for (let cut = 1; cut <= 3; cut++) {
      p.resetAll();
      await writer.increment(page, "likes");
      await eventually(() => expect(r.last()?.counters.likes).toBe(cut));
    }
    expect(c.connects).toBeGreaterThanOrEqual(4);
    expect(streamsOf(p, page)).toBe(c.connects);
  });

  test("sse - a stream on which nothing arrives, not even a heartbeat, for reconnect.idleMs is opened again", async () => {
    const p = await fx.proxy();
    const { client: c } = fx.client(p.url, {
      // Six heartbeats: the second stream's must not look idle when a loaded host stalls one.
      reconnect: { baseMs: 20, maxMs: RECONNECT_MAX_MS, idleMs: 6 * HEARTBEAT_S * 1000 },
    });
    const page = uniquePage("sse-silent");
    // The first stream's answer never comes back: only the idle timer can save it.
    p.stallNext(1);
    const r = recorder();
    c.subscribe(page, r.listener);
    await eventually(() => expect(r.last()).toMatchObject({ page, viewers: 0 }), { timeoutMs: 15_000 });
    expect(streamsOf(p, page)).toBe(2);
  });

  test("sse - a refusal reaches onError; rate_limited is tried again after Retry-After, unauthorized is not", async () => {
    const p = await fx.proxy();
    const { client: c } = fx.client(p.url);
    const page = uniquePage("sse-refused");
    p.respondNext(1, {
      status: 429,
      body: { error: { code: "rate_limited", message: "slow down" } },
      headers: { "retry-after": "1" },
    });
    const errors: LivecountError[] = [];
    const r = recorder();
    c.subscribe(page, r.listener, { onError: (e) => errors.push(e) });
    await eventually(() => expect(r.last()).toMatchObject({ page }), { timeoutMs: 10_000 });
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(RateLimitedError);
    expect(errors[0]).toMatchObject({ status: 429, retryAfterMs: 1000, page });

    const privateErrors: LivecountError[] = [];
    c.subscribe("user-7", () => {}, { onError: (e) => privateErrors.push(e) });
    await eventually(() => expect(privateErrors).toHaveLength(1));
    expect(privateErrors[0]).toBeInstanceOf(AuthError);
    expect(privateErrors[0]).toMatchObject({ code: "unauthorized", status: 401, page: "user-7" });
    // Not asked again: nothing to wait for but three times the longest backoff (reconnect.maxMs).
    await sleep(3 * RECONNECT_MAX_MS);
    expect(streamsOf(p, "user-7")).toBe(1);
    expect(privateErrors).toHaveLength(1);
    // A token opens it: the page's stream is opened again with it.
    const token = await signJoinToken({ secret: SECRET, viewer: "v7", page: "user-7" });
    const withToken = recorder();
    c.subscribe("user-7", withToken.listener, { token });
    await eventually(() => expect(withToken.last()).toMatchObject({ page: "user-7", viewers: 0 }));
    expect(streamsOf(p, "user-7")).toBe(2);
  });
});

describe("sdk - subscribe over event streams across a gateway restart", () => {
  test("sse - a gateway that stops ends the stream; the subscriber reconnects to the gateway that takes its place", async () => {
    const env = { LIVECOUNT_SSE_HEARTBEAT_S: String(HEARTBEAT_S) };
    let platform = await TestPlatform.start(env);
    // The address clients know stays; the gateway behind it restarts (on another port, as a
    // restarted process behind a load balancer: uWS cannot listen again on a port it just left).
    const front = await LinkProxy.start({ targetPort: platform.app.port });
    const { client } = testClient(`http://127.0.0.1:${front.port}`, SSE);
    try {
      const page = uniquePage("sse-restart");
      await client.increment(page, "likes", 5);
      const r = recorder();
      client.subscribe(page, r.listener);
      await eventually(() => expect(r.last()?.counters.likes).toBe(5));
      await platform.close();
      // A new in-memory platform: the page starts over, so its first value tells the two apart.
      platform = await TestPlatform.start(env);
      front.retarget(platform.app.port);
      await client.increment(page, "likes", 1);
      await eventually(() => expect(r.last()?.counters.likes).toBe(1), { timeoutMs: 15_000 });
      expect(client.connects).toBeGreaterThanOrEqual(2);
    } finally {
      await client.close();
      await front.close();
      await platform.close();
    }
  });
});
