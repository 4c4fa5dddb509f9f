/**
 * A counter node's ops server: health and readiness stay open for probes; metrics need the admin
 * key, and without one configured they answer 401 to everyone.
 */
import { connect, type Socket } from "node:net";
import { silentLogger } from "@livecount/runtime";
import { Registry } from "prom-client";
import { afterEach, describe, expect, test } from "vitest";
import { startOpsServer } from "../src/ops_server.js";

const ADMIN_KEY = "counter-admin-key-000001";

describe("counter - ops server", () => {
  let close: (() => Promise<void>) | undefined;

  afterEach(async () => {
    await close?.();
    close = undefined;
  });

  async function start(
    adminKey: string | undefined,
    limits: Pick<Parameters<typeof startOpsServer>[0], "maxConnections" | "timeouts"> = {
      maxConnections: 64,
    },
  ): Promise<string> {
    const ops = await startOpsServer({
      port: 0,
      host: "127.0.0.1",
      registry: new Registry(),
      isReady: () => true,
      adminKey,
      logger: silentLogger,
      ...limits,
    });
    close = ops.close;
    return `http://127.0.0.1:${ops.port}`;
  }

  test("ops - metrics need the admin key; health and readiness do not", async () => {
    const url = await start(ADMIN_KEY);
    expect((await fetch(`${url}/metrics`)).status).toBe(401);
    expect(
      (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_KEY}x` } })).status,
    ).toBe(401);
    const ok = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    expect(ok.status).toBe(200);
    expect(ok.headers.get("access-control-allow-origin")).toBeNull();
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    expect((await fetch(`${url}/readyz`)).status).toBe(200);
  });

  test("ops - without LIVECOUNT_ADMIN_KEY metrics answer 401 to everyone", async () => {
    const url = await start(undefined);
    const res = await fetch(`${url}/metrics`, { headers: { authorization: "Bearer anything-at-all-000" } });
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ error: { code: "unauthorized" } });
  });

  test("ops - another method on a route is 405 with Allow; an unknown path 404", async () => {
    const url = await start(ADMIN_KEY);
    for (const path of ["/healthz", "/readyz", "/metrics"]) {
      const res = await fetch(`${url}${path}`, { method: "POST" });
      expect(res.status, path).toBe(405);
      expect(res.headers.get("allow")).toBe("GET, HEAD");
      expect(await res.json()).toMatchObject({ error: { code: "method_not_allowed" } });
    }
    expect((await fetch(`${url}/healthz`, { method: "HEAD" })).status).toBe(200);
    expect((await fetch(`${url}/nothing`)).status).toBe(404);
  });
  /** A TCP connection to the server that sends nothing; resolves once connected. */
  function silent(url: string, sockets: Socket[]): Promise<Socket> {
    const { hostname, port } = new URL(url);
    return new Promise((resolve, reject) => {
      const socket = connect(Number(port), hostname, () => resolve(socket)).once("error", reject);
      // Read what comes (a 408), so the server's close is seen.
      socket.on("error", () => {}).resume();
      sockets.push(socket);
    });
  }

  const closedWithin = (socket: Socket, ms: number): Promise<boolean> =>
    new Promise((resolve) => {
      if (socket.closed) return resolve(true);
      const timer = setTimeout(() => resolve(false), ms);
      socket.once("close", () => {
        clearTimeout(timer);
        resolve(true);
      });
    });

  test("ops - at LIVECOUNT_OPS_MAX_CONNECTIONS a connection more is closed as it comes; one fewer and probes answer", async () => {
    const url = await start(ADMIN_KEY, { maxConnections: 3 });
    const sockets: Socket[] = [];
    try {
      for (let i = 0; i < 3; i++) await silent(url, sockets);
      const over = await silent(url, sockets);
      expect(await closedWithin(over, 2_000), "the connection past the limit is closed").toBe(true);
      await expect(fetch(`${url}/healthz`)).rejects.toThrow();
      sockets[0]!.destroy();
      await closedWithin(sockets[0]!, 1_000);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect((await fetch(`${url}/healthz`, { headers: { connection: "close" } })).status).toBe(200);
    } finally {
      for (const socket of sockets) socket.destroy();
    }
  });

  test("ops - a connection that sends no request, or only part of one, is closed after the headers timeout", async () => {
    const timeouts = { headersMs: 300, requestMs: 600, checkMs: 100 };
    const url = await start(ADMIN_KEY, { maxConnections: 64, timeouts });
    const sockets: Socket[] = [];
    try {
      const quiet = await silent(url, sockets);
      const trickle = await silent(url, sockets);
      trickle.write("GET /healthz HTTP/1.1\r\nHost: x\r\n");
      const timer = setInterval(() => trickle.write("X-Slow: 1\r\n"), 100);
      try {
        // Slack for a loaded host, far below node:http's own 60 s headers timeout that it rules out.
        const bound = timeouts.requestMs + timeouts.checkMs + 5_000;
        expect(await closedWithin(quiet, bound), "a silent connection").toBe(true);
        expect(await closedWithin(trickle, bound), "a trickling one").toBe(true);
      } finally {
        clearInterval(timer);
      }
    } finally {
      for (const socket of sockets) socket.destroy();
    }
  });
});
