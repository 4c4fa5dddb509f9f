import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { ADMIN_HEADERS, TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";

const MAX_BODY_BYTES = 64 * 1024;
/** Largest `by` of one change (protocol v1). */
const MAX_CHANGE = 1_000_000_000;

interface ChangeBody {
  readonly page: string;
  readonly counter: string;
  readonly value: number;
  readonly updated_at: number;
}

describe("gateway - HTTP API", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start();
  });

  afterAll(async () => {
    await platform?.close();
  });

  function counterUrl(page: string): string {
    return `${platform.url}/v1/pages/${encodeURIComponent(page)}/counter`;
  }

  /** PUT /v1/pages/{page}/counter with the test key unless `headers` say otherwise. */
  function put(page: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
    return fetch(counterUrl(page), {
      method: "PUT",
      headers: {
        authorization: `Bearer ${TEST_PUBLISHER_KEY}`,
        "content-type": "application/json",
        ...headers,
      },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
  }

  async function errorCode(res: Response): Promise<string> {
    const body = (await res.json()) as { error?: { code?: unknown; message?: unknown } };
    expect(typeof body.error?.message).toBe("string");
    return String(body.error?.code);
  }

  test("gateway - GET counter returns page, count, viewers, counters and updated_at with Cache-Control no-store", async () => {
    const page = "http-read";
    const before = Date.now();
    const res = await fetch(counterUrl(page));
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    const body = (await res.json()) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual([
      "active",
      "connections",
      "count",
      "counters",
      "dcs",
      "lag_ms",
      "page",
      "updated_at",
      "viewers",
    ]);
    expect(body).toMatchObject({
      page,
      count: 0,
      viewers: 0,
      active: 0,
      connections: 0,
      counters: {},
      dcs: ["dc1"],
      lag_ms: 0,
    });
    expect(body.updated_at).toBeGreaterThanOrEqual(before - 1000);

    const client = await platform.connect();
    client.join(page, "reader");
    await platform.waitForViewers(page, 1);
    const read = await platform.counter(page);
    expect(read.count).toBe(read.viewers);
    expect(read.count).toBe(1);
    expect(read).toMatchObject({ active: 1, connections: 1 });
  });

  test("gateway - page ids with '/', '?' and '%' work percent-encoded, over HTTP and WebSocket alike", async () => {
    const page = "a/b?c%d#e";
    const watcher = await platform.watcher(page);
    const res = await put(page, { action: "increment", counter: "likes", by: 2 });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ page, counter: "likes", value: 2 });
    expect(await platform.counter(page)).toMatchObject({ page, counters: { likes: 2 } });
    await expect.poll(() => watcher.lastCount(page)?.counters.likes).toBe(2);
  });

  test("gateway - reads are public to any origin (CORS), changes are not", async () => {
    const read = await fetch(counterUrl("cors-read"), { headers: { origin: "https://blog.example" } });
    expect(read.headers.get("access-control-allow-origin")).toBe("*");
    const list = await fetch(`${platform.url}/v1/counters?page=cors-read`);
    expect(list.headers.get("access-control-allow-origin")).toBe("*");
    const change = await put("cors-read", { action: "increment", counter: "likes" });
    expect(change.status).toBe(200);
    expect(change.headers.get("access-control-allow-origin")).toBeNull();
  });

  test("gateway - an invalid page id gets 400 invalid_page", async () => {
    for (const raw of ["%20", "a%20b", "caf%C3%A9", "%00", "%7F", "p".repeat(129), "%zz", "%E2%82"]) {
      for (const method of ["GET", "PUT"]) {
        const res = await fetch(`${platform.url}/v1/pages/${raw}/counter`, {
          method,
          headers: { authorization: `Bearer ${TEST_PUBLISHER_KEY}` },
          ...(method === "PUT" ? { body: JSON.stringify({ action: "increment", counter: "likes" }) } : {}),
        });
        expect(res.status, `${method} ${raw}`).toBe(400);
        expect(await errorCode(res)).toBe("invalid_page");
      }
    }
  });

  test("gateway - PUT without a valid publisher key gets 401 unauthorized and counts nothing", async () => {
    const page = "http-auth";
    const body = { action: "increment", counter: "likes", by: 5 };
    const attempts: Array<Record<string, string>> = [
      { authorization: "" },
      { authorization: "Bearer" },
      { authorization: "Bearer wrong-key-123456" },
      { authorization: `Bearer ${TEST_PUBLISHER_KEY}x` },
      { authorization: `Basic ${Buffer.from(`user:${TEST_PUBLISHER_KEY}`).toString("base64")}` },
      { authorization: TEST_PUBLISHER_KEY },
      { authorization: `bearer  ${TEST_PUBLISHER_KEY}` },
    ];
    for (const headers of attempts) {
      const res = await put(page, body, { ...headers, "idempotency-key": `auth-${Math.random()}` });
      expect(res.status, JSON.stringify(headers)).toBe(401);
      expect(await errorCode(res)).toBe("unauthorized");
    }
    const noHeader = await fetch(counterUrl(page), { method: "PUT", body: JSON.stringify(body) });
    expect(noHeader.status).toBe(401);
    expect(await errorCode(noHeader)).toBe("unauthorized");
    expect((await platform.counter(page)).counters).toEqual({});
  });

  test("gateway - bad PUT bodies get a 4xx with a stable code and count nothing", async () => {
    const page = "http-bodies";
    const cases: ReadonlyArray<[string, string | unknown, number, string]> = [
      ["empty", "", 400, "invalid_body"],
      ["not JSON", "{action:", 400, "invalid_body"],
      ["not UTF-8", "\udc00", 400, "invalid_body"],
      ["an array", [{ action: "increment", counter: "likes" }], 400, "invalid_body"],
      ["a number", 42, 400, "invalid_body"],
      ["null", null, 400, "invalid_body"],
      ["no action", { counter: "likes", by: 1 }, 400, "invalid_body"],
      ["unknown action", { action: "set", counter: "likes", by: 1 }, 400, "invalid_body"],
      ["no counter", { action: "increment", by: 1 }, 400, "invalid_counter"],
      ["counter with a space", { action: "increment", counter: "my likes" }, 400, "invalid_counter"],
      ["counter of 65 characters", { action: "increment", counter: "c".repeat(65) }, 400, "invalid_counter"],
      ["the internal viewers counter", { action: "increment", counter: "@viewers" }, 400, "invalid_counter"],
      ["counter not a string", { action: "increment", counter: 12 }, 400, "invalid_counter"],
      ["by 0", { action: "increment", counter: "likes", by: 0 }, 400, "invalid_body"],
      ["negative by", { action: "increment", counter: "likes", by: -1 }, 400, "invalid_body"],
      ["fractional by", { action: "increment", counter: "likes", by: 1.5 }, 400, "invalid_body"],
      ["huge by", { action: "increment", counter: "likes", by: 1e12 }, 400, "invalid_body"],
      [
        "by beyond safe integers",
        { action: "decrement", counter: "likes", by: 2 ** 60 },
        400,
        "invalid_body",
      ],
      ["by as a string", { action: "increment", counter: "likes", by: "1" }, 400, "invalid_body"],
      ["by null", { action: "increment", counter: "likes", by: null }, 400, "invalid_body"],
      [
        "over 64 KiB",
        JSON.stringify({ action: "increment", counter: "likes", pad: "x".repeat(MAX_BODY_BYTES) }),
        413,
        "payload_too_large",
      ],
    ];
    for (const [name, body, status, code] of cases) {
      const res = await put(page, body, { "idempotency-key": `body-${name.replace(/\W/g, "-")}` });
      expect(res.status, name).toBe(status);
      expect(await errorCode(res), name).toBe(code);
    }
    // Too long, and empty: an empty key is a key (an invalid one), not a request for a server-made one.
    for (const key of ["k".repeat(129), ""]) {
      const badKey = await put(page, { action: "increment", counter: "likes" }, { "idempotency-key": key });
      expect(badKey.status, `key of ${key.length}`).toBe(400);
      expect(await errorCode(badKey)).toBe("invalid_idempotency_key");
    }
    expect((await platform.counter(page)).counters).toEqual({});
    // The server is still fine after the oversize body.
    expect((await fetch(`${platform.url}/healthz`)).status).toBe(200);
  });

  test("protocol - by of exactly 10^9 is applied either way; one more is 400 invalid_body and changes nothing", async () => {
    const page = "http-by-limit";
    const up = await put(page, { action: "increment", counter: "likes", by: MAX_CHANGE });
    expect(up.status).toBe(200);
    expect(((await up.json()) as ChangeBody).value).toBe(MAX_CHANGE);
    const down = await put(page, { action: "decrement", counter: "likes", by: MAX_CHANGE });
    expect(((await down.json()) as ChangeBody).value).toBe(0);
    for (const action of ["increment", "decrement"]) {
      const past = await put(page, { action, counter: "likes", by: MAX_CHANGE + 1 });
      expect(past.status, action).toBe(400);
      expect(await errorCode(past), action).toBe("invalid_body");
    }
    expect((await platform.counter(page)).counters).toEqual({ likes: 0 });
  });

  test("gateway - PUT increments and decrements a counter", async () => {
    const page = "http-inc-dec";
    const inc = await put(page, { action: "increment", counter: "likes", by: 3 });
    expect(inc.status).toBe(200);
    expect(inc.headers.get("idempotent-replayed")).toBeNull();
    const incBody = (await inc.json()) as ChangeBody;
    expect(incBody).toMatchObject({ page, counter: "likes", value: 3 });
    expect(typeof incBody.updated_at).toBe("number");
    const inc1 = (await (await put(page, { action: "increment", counter: "likes" })).json()) as ChangeBody;
    expect(inc1.value).toBe(4);
    const dec = (await (
      await put(page, { action: "decrement", counter: "likes", by: 2 })
    ).json()) as ChangeBody;
    expect(dec.value).toBe(2);
    const other = (await (
      await put(page, { action: "decrement", counter: "stock.v2:x-y_z", by: 1 })
    ).json()) as ChangeBody;
    expect(other.value).toBe(-1);
    expect(await platform.counter(page)).toMatchObject({
      counters: { likes: 2, "stock.v2:x-y_z": -1 },
      viewers: 0,
    });
  });

  test("gateway - the same Idempotency-Key retried 20 times counts once and answers the identical body", async () => {
    const page = "http-idem-serial";
    const change = { action: "increment", counter: "likes", by: 7 };
    const responses: Response[] = [];
    for (let i = 0; i < 20; i++) responses.push(await put(page, change, { "idempotency-key": "serial-key" }));
    const bodies = await Promise.all(responses.map((r) => r.json() as Promise<ChangeBody>));
    expect(responses.every((r) => r.status === 200)).toBe(true);
    expect(bodies[0]).toMatchObject({ page, counter: "likes", value: 7 });
    for (const body of bodies) expect(body).toEqual(bodies[0]);
    expect(responses[0]!.headers.get("idempotent-replayed")).toBeNull();
    for (const r of responses.slice(1)) expect(r.headers.get("idempotent-replayed")).toBe("true");
    expect((await platform.counter(page)).counters.likes).toBe(7);
  });

  test("gateway - the same Idempotency-Key sent 20 times at once counts once and answers the identical body", async () => {
    const page = "http-idem-concurrent";
    const change = { action: "increment", counter: "likes", by: 3 };
    const responses = await Promise.all(
      Array.from({ length: 20 }, () => put(page, change, { "idempotency-key": "concurrent-key" })),
    );
    const bodies = await Promise.all(responses.map((r) => r.json() as Promise<ChangeBody>));
    expect(responses.map((r) => r.status)).toEqual(Array(20).fill(200));
    for (const body of bodies) expect(body).toEqual(bodies[0]);
    expect(bodies[0]).toMatchObject({ value: 3 });
    // Exactly one request applied the change; every other one was a replay.
    expect(responses.filter((r) => r.headers.get("idempotent-replayed") === null)).toHaveLength(1);
    expect((await platform.counter(page)).counters.likes).toBe(3);
    // Later retries still get the same answer.
    const late = await put(page, change, { "idempotency-key": "concurrent-key" });
    expect(await late.json()).toEqual(bodies[0]);
  });

  test("gateway - the same Idempotency-Key with a different change gets 409 idempotency_conflict", async () => {
    const page = "http-idem-conflict";
    const first = await put(
      page,
      { action: "increment", counter: "likes", by: 1 },
      { "idempotency-key": "conflict-key" },
    );
    expect(first.status).toBe(200);
    for (const change of [
      { action: "increment", counter: "likes", by: 2 },
      { action: "decrement", counter: "likes", by: 1 },
      { action: "increment", counter: "shares", by: 1 },
    ]) {
      const res = await put(page, change, { "idempotency-key": "conflict-key" });
      expect(res.status, JSON.stringify(change)).toBe(409);
      expect(await errorCode(res)).toBe("idempotency_conflict");
    }
    expect((await platform.counter(page)).counters).toEqual({ likes: 1 });
  });

  test("gateway - the same Idempotency-Key with different changes at once applies one and refuses the others", async () => {
    const page = "http-idem-conflict-concurrent";
    const changes = [1, 2, 3, 4, 5].map((by) => ({ action: "increment", counter: "likes", by }));
    const responses = await Promise.all(
      changes.map((c) => put(page, c, { "idempotency-key": "racing-key" })),
    );
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    expect(statuses.filter((s) => s === 409)).toHaveLength(changes.length - 1);
    const applied = changes[statuses.indexOf(200)]!.by;
    expect((await platform.counter(page)).counters).toEqual({ likes: applied });
  });

  test("gateway - watchers see likes in count frames", async () => {
    const page = "http-likes-frames";
    const watcher = await platform.watcher(page);
    const binaryWatcher = await platform.watcher(page, { encoding: "msgpack" });
    const viewer = await platform.connect();
    viewer.join(page, "liker");
    await watcher.waitForViewers(page, 1);
    await put(page, { action: "increment", counter: "likes", by: 4 });
    await expect.poll(() => watcher.lastCount(page)?.counters.likes).toBe(4);
    await expect.poll(() => binaryWatcher.lastCount(page)?.counters.likes).toBe(4);
    expect(watcher.lastCount(page)?.viewers).toBe(1);
    await put(page, { action: "decrement", counter: "likes", by: 1 });
    await expect.poll(() => watcher.lastCount(page)?.counters.likes).toBe(3);
    // A watcher arriving later gets the current value at once.
    const late = await platform.watcher(page);
    expect(late.lastCount(page)).toMatchObject({ viewers: 1, counters: { likes: 3 } });
  });

  test("gateway - healthz, readyz and metrics answer", async () => {
    const health = await fetch(`${platform.url}/healthz`);
    expect(health.status).toBe(200);
    const ready = await fetch(`${platform.url}/readyz`);
    expect(ready.status).toBe(200);
    const metrics = await fetch(`${platform.url}/metrics`, { headers: ADMIN_HEADERS });
    expect(metrics.status).toBe(200);
    expect(metrics.headers.get("content-type")).toMatch(/^text\/plain/);
    expect(metrics.headers.get("cache-control")).toBe("no-store");
    const text = await metrics.text();
    for (const name of [
      "livecount_gateway_sockets",
      "livecount_gateway_http_requests_total",
      "livecount_gateway_presence_ops_sent_total",
    ]) {
      expect(text).toContain(name);
    }
    expect(text).toMatch(/^livecount_counter_\w+/m);
  });

  test("gateway - HEAD answers as GET would, status and headers, with no body: a request after it on the same connection reads right", async () => {
    const get = await fetch(`${platform.url}/healthz`);
    const getBody = await get.text();
    const missing = await fetch(`${platform.url}/v1/nothing-here`);
    const missingBody = await missing.text();
    // Two requests on one connection: a HEAD whose answer carried a body would corrupt the second.
    const raw = await rawHttp(
      platform.app.port,
      "HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n" +
        "HEAD /v1/nothing-here HTTP/1.1\r\nHost: t\r\n\r\n" +
        "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    const [head, headMissing, after] = raw.split(/(?=HTTP\/1\.1 )/);
    expect(head).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(head).toMatch(new RegExp(`\r\ncontent-length: ${Buffer.byteLength(getBody)}\r\n`, "i"));
    expect(head).toMatch(/\r\ncontent-type: application\/json\r\n/i);
    expect(head!.endsWith("\r\n\r\n")).toBe(true);
    expect(headMissing).toMatch(/^HTTP\/1\.1 404 Not Found\r\n/);
    expect(headMissing).toMatch(new RegExp(`\r\ncontent-length: ${Buffer.byteLength(missingBody)}\r\n`, "i"));
    expect(headMissing!.endsWith("\r\n\r\n")).toBe(true);
    expect(after).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(after!.endsWith(`\r\n\r\n${getBody}`)).toBe(true);
  });

  test("gateway - unknown routes get 404 and other methods on a counter 405", async () => {
    const missing = await fetch(`${platform.url}/v1/nothing-here`);
    expect(missing.status).toBe(404);
    expect(await errorCode(missing)).toBe("not_found");
    const method = await fetch(counterUrl("http-method"), {
      method: "PATCH",
      headers: { authorization: `Bearer ${TEST_PUBLISHER_KEY}` },
    });
    expect(method.status).toBe(405);
    expect(method.headers.get("allow")).toBe("GET, HEAD, PUT");
    expect(await errorCode(method)).toBe("method_not_allowed");
  });
});

/** Sends `request` bytes as they are on one TCP connection and resolves with everything answered until it closes. */
function rawHttp(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => socket.write(request));
    const chunks: Buffer[] = [];
    socket.on("data", (c: Buffer) => chunks.push(c));
    socket.on("end", () => resolve(Buffer.concat(chunks).toString("latin1")));
    socket.on("error", reject);
  });
}
