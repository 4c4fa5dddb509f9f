/**
 * A counter node's ops server: health and readiness stay open for probes; metrics need the admin
 * key, and without one configured they answer 401 to everyone.
 */
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

  async function start(adminKey: string | undefined): Promise<string> {
    const ops = await startOpsServer({
      port: 0,
      host: "127.0.0.1",
      registry: new Registry(),
      isReady: () => true,
      adminKey,
      logger: silentLogger,
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
});
