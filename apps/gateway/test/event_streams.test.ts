/**
 * Server-Sent Events at `GET /v1/pages/{page}/events`, against a real embedded gateway with a plain
 * HTTP client (Node's `http`, test/support/sse_client.ts) and real WebSocket viewers: the value on
 * connect and on every change (the very frames sockets get), heartbeats, private and invalid pages,
 * and every way a stream ends (the client leaves, it reads too slowly, the gateway stops) releasing
 * what it held.
 */
import { signJoinToken } from "@livecount/sdk";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { eventually, within } from "../../../test/support/eventually.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { SseClient } from "../../../test/support/sse_client.js";

const SECRET = "event-streams-test-secret-0123456789";
const PUBLISHER = { authorization: `Bearer ${TEST_PUBLISHER_KEY}` } as const;

/** The value of a metric sample (`name{labels}` as written), 0 when absent. */
async function metric(platform: TestPlatform, sample: string): Promise<number> {
  const line = (await platform.metricsText()).split("\n").find((l) => l.startsWith(`${sample} `));
  return line === undefined ? 0 : Number(line.split(" ")[1]);
}

async function increment(platform: TestPlatform, page: string, counter: string): Promise<void> {
  const res = await fetch(`${platform.url}/v1/pages/${encodeURIComponent(page)}/counter`, {
    method: "PUT",
    headers: { ...PUBLISHER, "content-type": "application/json" },
    body: JSON.stringify({ action: "increment", counter }),
  });
  expect(res.status).toBe(200);
}

describe("gateway - event streams", () => {
  let platform: TestPlatform;
  const events = (page: string, query = ""): string =>
    `${platform.url}/v1/pages/${encodeURIComponent(page)}/events${query}`;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_SSE_HEARTBEAT_S: "1",
      LIVECOUNT_PRIVATE_PREFIXES: "user-",
      LIVECOUNT_JOIN_SECRET: SECRET,
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("events - a stream gets the value on connect, then the frames sockets get when a viewer joins and a publisher increments", async () => {
    const page = "sse/live?#%";
    await increment(platform, page, "likes");
    const stream = await SseClient.open(events(page), { headers: { origin: "https://a.example" } });
    expect(stream.status).toBe(200);
    expect(stream.headers["content-type"]).toBe("text/event-stream");
    expect(stream.headers["cache-control"]).toBe("no-store");
    expect(stream.headers["x-accel-buffering"]).toBe("no");
    expect(stream.headers["access-control-allow-origin"]).toBe("*");
    expect(await stream.nextCount()).toMatchObject({
      type: "count",
      page,
      viewers: 0,
      counters: { likes: 1 },
    });
    // A stream watches: it is no viewer.
    expect((await platform.counter(page)).viewers).toBe(0);

    const watcher = await platform.watcher(page);
    const viewer = await platform.connect();
    viewer.join(page, "sse-viewer");
    const joined = await stream.nextCount((f) => f.viewers === 1);
    await increment(platform, page, "likes");
    const liked = await stream.nextCount((f) => f.counters.likes === 2);
    // The same frames, byte for byte what the socket decodes, with the frame's ts as the event id.
    await eventually(() => expect(watcher.lastCount(page)).toEqual(liked));
    expect(watcher.counts(page)).toContainEqual(joined);
    const last = stream.events.at(-1)!;
    expect(last).toMatchObject({ event: "count", id: String(liked.ts) });
    expect(JSON.parse(last.data)).toEqual(liked);
    stream.close();
    await Promise.all([watcher.close(), viewer.close()]);
  });

  test("events - an idle stream gets a heartbeat comment every LIVECOUNT_SSE_HEARTBEAT_S", async () => {
    const stream = await SseClient.open(events("sse-idle"));
    await stream.nextCount();
    await eventually(
      () => expect(stream.comments.filter((c) => c === "ping").length).toBeGreaterThanOrEqual(2),
      {
        timeoutMs: 5000,
      },
    );
    // Still the one value: a heartbeat is no event.
    expect(stream.counts).toHaveLength(1);
    stream.close();
  });

  test("events - a private page needs a join token (?token= or Authorization) or a publisher key, otherwise 401; a bad page id is 400; HEAD holds nothing", async () => {
    const page = "user-42";
    const refused = await SseClient.open(events(page));
    expect(refused.status).toBe(401);
    expect(await refused.body()).toMatchObject({ error: { code: "unauthorized" } });
    const otherPage = await signJoinToken({ secret: SECRET, viewer: "v", page: "user-43" });
    expect((await SseClient.open(events(page, `?token=${otherPage}`))).status).toBe(401);

    const token = await signJoinToken({ secret: SECRET, viewer: "v", page });
    const byQuery = await SseClient.open(events(page, `?token=${token}`));
    const byHeader = await SseClient.open(events(page), { headers: { authorization: `Bearer ${token}` } });
    const byKey = await SseClient.open(events(page), { headers: PUBLISHER });
    for (const stream of [byQuery, byHeader, byKey]) {
      expect(stream.status).toBe(200);
      expect(await stream.nextCount()).toMatchObject({ page, viewers: 0 });
      stream.close();
    }

    const bad = await SseClient.open(`${platform.url}/v1/pages/a%20b/events`);
    expect(bad.status).toBe(400);
    expect(await bad.body()).toMatchObject({ error: { code: "invalid_page" } });
    const post = await fetch(events("sse-post"), { method: "POST" });
    expect(post.status).toBe(405);
    // HEAD: a stream's headers, no body, and no stream held open.
    await eventually(() => expect(platform.app.gateway.eventStreams.open).toBe(0));
    const head = await fetch(events("sse-head"), { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-type")).toBe("text/event-stream");
    expect(await head.text()).toBe("");
    expect(platform.app.gateway.eventStreams.open).toBe(0);
  });

  test("events - streams that go away release their watch, connection slot and heartbeat: the counts go back to zero", async () => {
    const pages = ["sse-gone-a", "sse-gone-b"];
    const closedBefore = await metric(
      platform,
      'livecount_gateway_event_streams_closed_total{reason="client"}',
    );
    const watchedBefore = await metric(platform, "livecount_gateway_watched_pages");
    const streams = await Promise.all([...pages, ...pages].map((page) => SseClient.open(events(page))));
    await Promise.all(streams.map((s) => s.nextCount()));
    expect(platform.app.gateway.eventStreams).toEqual({ open: 4, heartbeatArmed: true });
    expect(await metric(platform, "livecount_gateway_event_streams")).toBe(4);
    expect(await metric(platform, "livecount_gateway_watched_pages")).toBe(watchedBefore + 2);

    for (const s of streams) s.close();
    await eventually(() =>
      expect(platform.app.gateway.eventStreams).toEqual({ open: 0, heartbeatArmed: false }),
    );
    expect(await metric(platform, "livecount_gateway_event_streams")).toBe(0);
    expect(await metric(platform, "livecount_gateway_watched_pages")).toBe(watchedBefore);
    expect(await metric(platform, 'livecount_gateway_event_streams_closed_total{reason="client"}')).toBe(
      closedBefore + 4,
    );
  });
});

describe("gateway - event streams that end", () => {
  test("events - a stream that stops reading is closed past LIVECOUNT_MAX_BACKPRESSURE_BYTES unsent; others keep their events", async () => {
    const platform = await TestPlatform.start({
      LIVECOUNT_MAX_BACKPRESSURE_BYTES: "1024",
      // A thousand counters on one page and likes, past the default cap of 256.
      LIVECOUNT_MAX_COUNTERS_PER_PAGE: "1001",
      LIVECOUNT_PUBLISHER_BURST: "10000",
    });
    try {
      // A thousand long counter names make every event ~75 KB, so kernel buffers fill fast.
      const page = "sse-slow";
      const counter = (i: number): string => `reaction:${"x".repeat(48)}:${i}`;
      const batch = async (ids: number[], round: number): Promise<void> => {
        const body = ids.map((i) => ({ page, counter: counter(i), change: 1, id: `r${round}-${i}` }));
        const res = await fetch(`${platform.url}/v1/counters/increment`, {
          method: "POST",
          headers: { ...PUBLISHER, "content-type": "application/json" },
          body: JSON.stringify(body),
        });
        expect(res.status).toBe(200);
      };
      await batch(
        Array.from({ length: 1000 }, (_, i) => i),
        0,
      );
      const slow = await SseClient.open(`${platform.url}/v1/pages/${page}/events`);
      const healthy = await SseClient.open(`${platform.url}/v1/pages/${page}/events`);
      await Promise.all([slow.nextCount(), healthy.nextCount()]);
      slow.res.pause();
      let round = 0;
      await eventually(
        async () => {
          round++;
          await batch([round % 1000], round);
          expect(platform.app.gateway.eventStreams.open).toBe(1);
        },
        { timeoutMs: 20_000, intervalMs: 25 },
      );
      expect(
        await metric(platform, 'livecount_gateway_event_streams_closed_total{reason="slow_consumer"}'),
      ).toBe(1);
      // Cut, without the last chunk, once the client reads what reached it.
      slow.res.resume();
      expect(await within(slow.ended, 5000, "the slow stream's end")).toBe("cut");
      const from = healthy.counts.length;
      await increment(platform, page, "likes");
      expect(await healthy.nextCount((f) => f.counters.likes === 1, from)).toMatchObject({ page });
    } finally {
      await platform.close();
    }
  });

  test("events - a gateway that stops ends its streams cleanly and releases them", async () => {
    const platform = await TestPlatform.start();
    const streams = await Promise.all(
      ["sse-stop-a", "sse-stop-b"].map((page) => SseClient.open(`${platform.url}/v1/pages/${page}/events`)),
    );
    await Promise.all(streams.map((s) => s.nextCount()));
    await platform.close();
    // The last chunk, not a cut: the client knows the stream ended and reconnects elsewhere.
    expect(await Promise.all(streams.map((s) => within(s.ended, 5000, "a stream's end")))).toEqual([
      "end",
      "end",
    ]);
    expect(platform.app.gateway.eventStreams).toEqual({ open: 0, heartbeatArmed: false });
  });
});
