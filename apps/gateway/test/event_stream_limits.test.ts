/**
 * Event streams count against the quotas sockets have: connections per client address and per
 * gateway (the same 429 and 503 with Retry-After as a refused upgrade), pages per address and new
 * pages per address (as a watch), and the read budget of reads without a key. Each is tested at the
 * limit, with real streams from several loopback addresses (127.0.0.x).
 */
import { afterEach, describe, expect, test } from "vitest";
import WebSocket from "ws";
import { eventually } from "../../../test/support/eventually.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { SseClient, type SseOptions } from "../../../test/support/sse_client.js";

describe("gateway - event stream limits", () => {
  let platform: TestPlatform | undefined;
  const streams: SseClient[] = [];

  afterEach(async () => {
    for (const s of streams.splice(0)) s.close();
    await platform?.close();
    platform = undefined;
  });

  async function open(page: string, options: SseOptions = {}): Promise<SseClient> {
    const stream = await SseClient.open(`${platform!.url}/v1/pages/${page}/events`, options);
    streams.push(stream);
    if (stream.status === 200) await stream.nextCount();
    return stream;
  }

  /** A refused stream's status, Retry-After and error code. */
  async function refusal(
    stream: SseClient,
  ): Promise<{ status: number; retryAfter: string | undefined; code: unknown }> {
    const body = (await stream.body()) as { error?: { code?: unknown } };
    const retryAfter = stream.headers["retry-after"];
    return {
      status: stream.status,
      retryAfter: typeof retryAfter === "string" ? retryAfter : undefined,
      code: body.error?.code,
    };
  }

  /** The status a WebSocket upgrade gets: 101 when it opened (it is closed again). */
  function upgradeStatus(localAddress: string): Promise<number> {
    const ws = new WebSocket(platform!.wsUrl, { localAddress });
    return new Promise((resolve, reject) => {
      ws.once("open", () => {
        ws.terminate();
        resolve(101);
      });
      ws.once("unexpected-response", (_req, res) => {
        resolve(res.statusCode ?? 0);
        ws.terminate();
      });
      ws.once("error", reject);
    });
  }

  test("per address - exactly LIVECOUNT_MAX_CONNECTIONS_PER_IP streams and sockets together; one more is 429 with Retry-After", async () => {
    const PER_IP = 3;
    platform = await TestPlatform.start({ LIVECOUNT_MAX_CONNECTIONS_PER_IP: String(PER_IP) });
    const from = { localAddress: "127.0.0.2" };
    const socket = await platform.connect(from);
    const held = [await open("cap-a", from), await open("cap-b", from)];
    expect(held.map((s) => s.status)).toEqual([200, 200]);

    expect(await refusal(await open("cap-c", from))).toEqual({
      status: 429,
      retryAfter: "5",
      code: "rate_limited",
    });
    expect(await upgradeStatus("127.0.0.2")).toBe(429);
    expect((await open("cap-c", { localAddress: "127.0.0.3" })).status).toBe(200);

    // A stream never counted a viewer: its slot is free as soon as it is gone, not after the grace.
    held[0]!.close();
    await eventually(() => expect(platform!.app.gateway.eventStreams.open).toBe(2));
    expect((await open("cap-c", from)).status).toBe(200);
    await socket.ping();
  });

  test("gateway-wide - past LIVECOUNT_MAX_CONNECTIONS a stream is 503 with Retry-After, like an upgrade", async () => {
    const MAX = 2;
    platform = await TestPlatform.start({ LIVECOUNT_MAX_CONNECTIONS: String(MAX) });
    expect((await open("full-a", { localAddress: "127.0.0.10" })).status).toBe(200);
    const second = await open("full-b", { localAddress: "127.0.0.11" });
    expect(second.status).toBe(200);
    const full = await refusal(await open("full-c", { localAddress: "127.0.0.12" }));
    expect(full).toEqual({ status: 503, retryAfter: "5", code: "unavailable" });
    expect(await upgradeStatus("127.0.0.12")).toBe(503);
    // Reads still answer on a full gateway.
    expect((await platform.counter("full-a")).viewers).toBe(0);
    second.close();
    await eventually(() => expect(platform!.app.gateway.eventStreams.open).toBe(1));
    expect((await open("full-c", { localAddress: "127.0.0.12" })).status).toBe(200);
  });

  test("pages - a stream takes a page of its address's LIVECOUNT_MAX_PAGES_PER_IP, shared with its sockets' watches", async () => {
    platform = await TestPlatform.start({ LIVECOUNT_MAX_PAGES_PER_IP: "2" });
    const from = { localAddress: "127.0.0.2" };
    expect((await open("pages-a", from)).status).toBe(200);
    const socket = await platform.connect(from);
    socket.watch("pages-b");
    await socket.next((f) => f.type === "count" && f.page === "pages-b");

    expect(await refusal(await open("pages-c", from))).toEqual({
      status: 429,
      retryAfter: undefined,
      code: "too_many_pages",
    });
    expect((await open("pages-c", { localAddress: "127.0.0.3" })).status).toBe(200);
    socket.unwatch("pages-b");
    await eventually(async () => expect((await open("pages-c", from)).status).toBe(200));
  });

  test("pages - past LIVECOUNT_NEW_PAGE_RATE a stream of a page nobody here has is 429 with Retry-After; pages someone has are free", async () => {
    platform = await TestPlatform.start({ LIVECOUNT_NEW_PAGE_RATE: "1", LIVECOUNT_NEW_PAGE_BURST: "1" });
    const from = { localAddress: "127.0.0.2" };
    expect((await open("new-a", from)).status).toBe(200);
    const refused = await refusal(await open("new-b", from));
    expect(refused).toMatchObject({ status: 429, code: "rate_limited" });
    expect(refused.retryAfter).toMatch(/^[1-9]\d*$/);
    expect((await open("new-a", from)).status).toBe(200);
  });

  test("reads - a stream without a key spends a page read of LIVECOUNT_READ_BURST; with a publisher key it does not", async () => {
    platform = await TestPlatform.start({ LIVECOUNT_READ_RATE: "1", LIVECOUNT_READ_BURST: "1" });
    expect((await open("budget")).status).toBe(200);
    const refused = await refusal(await open("budget"));
    expect(refused).toMatchObject({ status: 429, code: "rate_limited" });
    expect(refused.retryAfter).toMatch(/^[1-9]\d*$/);
    const keyed = await open("budget", { headers: { authorization: `Bearer ${TEST_PUBLISHER_KEY}` } });
    expect(keyed.status).toBe(200);
  });
});
