/**
 * The SDK's socket offers the `livecount.counts` subprotocol: against a real gateway it gets one
 * counts frame per window for all its pages, and from a server that answers with `count` frames (a
 * gateway that predates counts frames) it reads those the same.
 */
import type { AddressInfo } from "node:net";
import WebSocket, { WebSocketServer } from "ws";
import { afterEach, describe, expect, test } from "vitest";
import type { WebSocketConstructor } from "../src/index.js";
import { eventually } from "../../../test/support/eventually.js";
import { recorder, uniquePage, useGateway } from "./support.js";

/** A long window, so the changes a test makes together travel in one frame. */
const WINDOW_MS = 500;

/** The `ws` WebSocket, keeping every socket the SDK opens so a test can read what was negotiated. */
function recordingWebSocket(): { sockets: WebSocket[]; WebSocket: WebSocketConstructor } {
  const sockets: WebSocket[] = [];
  class Recording extends WebSocket {
    constructor(url: string, protocols?: string | string[]) {
      super(url, protocols);
      sockets.push(this);
    }
  }
  return { sockets, WebSocket: Recording };
}

function metric(text: string, name: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? 0 : Number(line.split(" ")[1]);
}

describe("sdk - subscribe with counts frames", () => {
  const fx = useGateway({}, { LIVECOUNT_COALESCE_MS: String(WINDOW_MS) });
  const servers: WebSocketServer[] = [];

  afterEach(async () => {
    for (const s of servers) for (const socket of s.clients) socket.terminate();
    await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  });

  test("sdk - the socket negotiates livecount.counts and every subscription gets its page's changes", async () => {
    const { sockets, WebSocket: Recording } = recordingWebSocket();
    const { client: c } = fx.client(fx.platform.url, { WebSocket: Recording });
    const writer = fx.client(fx.platform.url).client;
    const pages = [uniquePage("counts-a"), uniquePage("counts-b"), uniquePage("counts-c")];
    const recs = pages.map((page) => {
      const r = recorder();
      c.subscribe(page, r.listener);
      return r;
    });
    await eventually(() => expect(recs.every((r) => r.last() !== undefined)).toBe(true));
    expect(sockets).toHaveLength(1);
    expect(sockets[0]!.protocol).toBe("livecount.counts");
    const before = metric(await fx.platform.metricsText(), "livecount_gateway_counts_frames_published_total");

    await Promise.all(pages.map((page, i) => writer.increment(page, "likes", i + 1)));
    await eventually(() =>
      recs.forEach((r, i) => expect(r.last()).toMatchObject({ page: pages[i], counters: { likes: i + 1 } })),
    );
    const after = metric(await fx.platform.metricsText(), "livecount_gateway_counts_frames_published_total");
    // Three pages changed together: at most the first goes alone (leading edge), the rest share a frame.
    expect(after - before).toBeGreaterThanOrEqual(1);
    expect(after - before).toBeLessThanOrEqual(2);
    expect(recs.every((r) => r.last()!.ts > 0)).toBe(true);
  });

  test("sdk - count frames from a server that predates counts frames are read the same, and counts frames too", async () => {
    const offered: string[] = [];
    const server = new WebSocketServer({ port: 0, host: "127.0.0.1" });
    servers.push(server);
    await new Promise((resolve) => server.once("listening", resolve));
    server.on("connection", (socket, req) => {
      offered.push(req.headers["sec-websocket-protocol"] ?? "");
      const ts = Date.now();
      socket.send(JSON.stringify({ type: "count", page: "old-a", viewers: 4, counters: { likes: 1 }, ts }));
      socket.send(
        JSON.stringify({
          type: "counts",
          ts,
          pages: {
            "old-a": {
              viewers: 5,
              active: 2,
              connections: 6,
              counters: { likes: 2 },
              dcs: ["eu", "us"],
              lag_ms: 240,
            },
            // Malformed optional fields are dropped, the value kept.
            "old-b": { viewers: 7, counters: {}, dcs: "eu", lag_ms: -0.5 },
            "not-subscribed": { viewers: 1, counters: {} },
          },
        }),
      );
    });
    const { port } = server.address() as AddressInfo;
    const { client: c } = fx.client(`http://127.0.0.1:${port}`);
    const a = recorder();
    const b = recorder();
    c.subscribe("old-a", a.listener);
    c.subscribe("old-b", b.listener);
    await eventually(() => expect(a.updates).toHaveLength(2));
    await eventually(() => expect(b.updates).toHaveLength(1));
    expect(offered).toEqual(["livecount.counts"]);
    expect(a.updates.map((u) => u.viewers)).toEqual([4, 5]);
    expect(a.last()).toEqual({
      page: "old-a",
      viewers: 5,
      active: 2,
      connections: 6,
      counters: { likes: 2 },
      ts: expect.any(Number),
      dcs: ["eu", "us"],
      lagMs: 240,
    });
    expect(b.last()).toEqual({ page: "old-b", viewers: 7, counters: {}, ts: expect.any(Number) });
    await c.close();
  });
});
