/**
 * docs/openapi.json describes what the running server really answers: every endpoint and every
 * error class is exercised against real gateways and each exchange is checked against the document
 * (status documented, required headers present and well-formed, content type, body schema). At the
 * end, every documented answer must have been produced at least once, except the ones a healthy
 * test platform cannot provoke (500 internal, 504 timeout). That the validator refuses what the
 * document does not allow is in openapi_validator.test.ts.
 */
import { describe, expect, test } from "vitest";
import { OpenApiDoc } from "../../../test/support/openapi.js";
import { eventually } from "../../../test/support/eventually.js";
import { TEST_ADMIN_KEY } from "../../../test/support/platform.js";
import { documentedHttp, openApiGateways } from "./openapi_gateways.js";

/** Answers a healthy platform cannot be made to give. */
const NOT_PROVOKED = /^\w+ (500|504)$/;

describe("gateway - OpenAPI document", () => {
  const doc = new OpenApiDoc();
  const gateways = openApiGateways();
  const { call, stream, expectDocumentedRequest } = documentedHttp(doc);

  test("openapi - every endpoint's answers, including each error class, match docs/openapi.json", async () => {
    const { platform, limited } = gateways;
    const base = platform.url;
    const page = "openapi/page?#%";
    const p = encodeURIComponent(page);

    expect((await call(base, "/healthz")).status).toBe(200);
    expect((await call(base, "/readyz")).status).toBe(200);
    expect((await call(base, "/metrics", { key: TEST_ADMIN_KEY })).status).toBe(200);
    expect((await call(base, "/metrics", { key: null })).status).toBe(401);
    expect((await call(base, "/metrics")).status).toBe(401);

    // PUT /v1/pages/{page}/counter
    const change = { action: "increment", counter: "likes", by: 3 };
    expectDocumentedRequest("PUT", `/v1/pages/${p}/counter`, change);
    expect(
      (await call(base, `/v1/pages/${p}/counter`, { method: "PUT", body: change, idempotencyKey: "oa-1" }))
        .status,
    ).toBe(200);
    const replay = await call(base, `/v1/pages/${p}/counter`, {
      method: "PUT",
      body: change,
      idempotencyKey: "oa-1",
    });
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    await call(base, `/v1/pages/${p}/counter`, {
      method: "PUT",
      body: { action: "decrement", counter: "stock" },
    });
    expect(
      (
        await call(base, `/v1/pages/${p}/counter`, {
          method: "PUT",
          body: { action: "set", counter: "likes" },
        })
      ).status,
    ).toBe(400);
    expect(
      (await call(base, `/v1/pages/${p}/counter`, { method: "PUT", body: change, key: null })).status,
    ).toBe(401);
    expect(
      (await call(base, `/v1/pages/${p}/counter`, { method: "PUT", body: change, key: "wrong-key-000000" }))
        .status,
    ).toBe(401);
    expect(
      (
        await call(base, `/v1/pages/${p}/counter`, {
          method: "PUT",
          body: { ...change, by: 4 },
          idempotencyKey: "oa-1",
        })
      ).status,
    ).toBe(409);
    expect(
      (
        await call(base, `/v1/pages/${p}/counter`, {
          method: "PUT",
          body: { ...change, pad: "x".repeat(70_000) },
        })
      ).status,
    ).toBe(413);

    // GET /v1/pages/{page}/counter, with a viewer, a visible counter and a deleted one.
    const viewer = await platform.connect();
    viewer.join(page, "openapi-viewer");
    await platform.waitForViewers(page, 1);
    await call(base, `/v1/pages/${p}/counter`, {
      method: "PUT",
      body: { action: "increment", counter: "gone" },
    });
    expect(
      (await call(base, `/v1/pages/${p}/counters/gone`, { method: "DELETE", idempotencyKey: "oa-del" }))
        .status,
    ).toBe(200);
    const read = await call(base, `/v1/pages/${p}/counter`);
    expect(read.body).toMatchObject({ viewers: 1, counters: { likes: 3, stock: -1 } });
    expect((await call(base, "/v1/pages/a%20b/counter")).status).toBe(400);
    expect((await call(base, "/v1/pages/openapi-private-1/counter", { key: null })).status).toBe(401);
    expect((await call(base, "/v1/pages/openapi-private-1/counter?token=a.b.c", { key: null })).status).toBe(
      401,
    );

    // GET /v1/pages/{page}/stats
    const stats = await call(base, `/v1/pages/${p}/stats`, { key: null });
    expect(stats.body).toMatchObject({
      page,
      viewers: 1,
      peak_viewers: { "1h": 1 },
      unique_visitors: { "24h": 1 },
    });
    expect((await call(base, "/v1/pages/a%20b/stats")).status).toBe(400);
    expect((await call(base, "/v1/pages/openapi-private-1/stats", { key: null })).status).toBe(401);
    expect(
      (await call(base, `/v1/pages/${p}/stats`, { method: "POST", fallback: "MethodNotAllowed" })).status,
    ).toBe(405);

    // GET /v1/pages/{page}/events: the stream up to its first event, and its refusals.
    const events = await stream(base, `/v1/pages/${p}/events`, null);
    expect(events.status).toBe(200);
    expect(events.text).toContain('"viewers":1');
    events.close();
    expect((await stream(base, "/v1/pages/a%20b/events")).status).toBe(400);
    expect((await stream(base, "/v1/pages/openapi-private-1/events", null)).status).toBe(401);

    // GET /v1/pages/{page}/counters/{counter}/window: likes 3, stock -1 in this minute or the last.
    const win = await call(base, `/v1/pages/${p}/counters/likes/window?seconds=120`, { key: null });
    expect(win.body).toMatchObject({ page, counter: "likes", window_s: 120, value: 3 });
    expect((await call(base, `/v1/pages/${p}/counters/stock/window?seconds=86400`)).body).toMatchObject({
      value: -1,
    });
    for (const bad of ["", "?seconds=0", "?seconds=86401", "?seconds=1.5", "?seconds=x"])
      expect((await call(base, `/v1/pages/${p}/counters/likes/window${bad}`)).status).toBe(400);
    expect((await call(base, `/v1/pages/${p}/counters/%40w/window?seconds=60`)).status).toBe(400);
    expect(
      (await call(base, "/v1/pages/openapi-private-1/counters/likes/window?seconds=60", { key: null }))
        .status,
    ).toBe(401);
    expect(
      (
        await call(base, `/v1/pages/${p}/counters/likes/window?seconds=60`, {
          method: "POST",
          fallback: "MethodNotAllowed",
        })
      ).status,
    ).toBe(405);

    // DELETE /v1/pages/{page}/counters/{counter}
    const del = await call(base, `/v1/pages/${p}/counters/gone`, {
      method: "DELETE",
      idempotencyKey: "oa-del",
    });
    expect(del.headers.get("idempotent-replayed")).toBe("true");
    expect((await call(base, `/v1/pages/${p}/counters/%40viewers`, { method: "DELETE" })).status).toBe(400);
    expect((await call(base, `/v1/pages/${p}/counters/likes`, { method: "DELETE", key: null })).status).toBe(
      401,
    );
    expect(
      (await call(base, `/v1/pages/${p}/counters/likes`, { method: "DELETE", idempotencyKey: "oa-1" }))
        .status,
    ).toBe(409);

    // POST /v1/pages/{page}/counters/{counter}/reset
    expect(
      (
        await call(base, `/v1/pages/${p}/counters/stock/reset`, {
          method: "POST",
          idempotencyKey: "oa-reset",
        })
      ).status,
    ).toBe(200);
    const resetAgain = await call(base, `/v1/pages/${p}/counters/stock/reset`, {
      method: "POST",
      idempotencyKey: "oa-reset",
    });
    expect(resetAgain.headers.get("idempotent-replayed")).toBe("true");
    expect(
      (await call(base, `/v1/pages/${p}/counters/${"c".repeat(65)}/reset`, { method: "POST" })).status,
    ).toBe(400);
    expect(
      (await call(base, `/v1/pages/${p}/counters/stock/reset`, { method: "POST", key: "nope-nope-nope" }))
        .status,
    ).toBe(401);
    expect(
      (await call(base, `/v1/pages/${p}/counters/stock/reset`, { method: "POST", idempotencyKey: "oa-del" }))
        .status,
    ).toBe(409);

    // POST /v1/counters/increment: applied, duplicate and conflicting items in one answer.
    const batch = [
      { page, counter: "likes", change: 2, id: "oa-b1" },
      { page, counter: "likes", change: 2, id: "oa-b1" },
      { page, counter: "likes", change: -1, id: "oa-b1" },
      { page: "openapi-other", counter: "claps", change: -5, id: "oa-b2" },
    ];
    expectDocumentedRequest("POST", "/v1/counters/increment", batch);
    const batched = await call(base, "/v1/counters/increment", { method: "POST", body: batch });
    expect(batched.status).toBe(200);
    expect((batched.body as { results: unknown[] }).results).toHaveLength(4);
    const badBatches: unknown[] = [
      [],
      [{ ...batch[0], change: 0 }],
      { page },
      [{ ...batch[0], counter: "@viewers" }],
    ];
    for (const bad of badBatches) {
      expect((await call(base, "/v1/counters/increment", { method: "POST", body: bad })).status).toBe(400);
      // The document refuses what the server refuses.
      expect(doc.violations(doc.requestSchema("POST", "/v1/counters/increment"), bad)).not.toEqual([]);
    }
    expect(
      (await call(base, "/v1/counters/increment", { method: "POST", body: batch, key: null })).status,
    ).toBe(401);
    const tooMany = Array.from({ length: 1001 }, (_, i) => ({
      page,
      counter: "likes",
      change: 1,
      id: `oa-${i}`,
    }));
    expect((await call(base, "/v1/counters/increment", { method: "POST", body: tooMany })).status).toBe(413);

    // GET /v1/counters: pages summed and raw, prefix listings with a cursor, bad queries.
    expect((await call(base, `/v1/counters?page=${p}&page=openapi-other`)).status).toBe(200);
    const raw = await call(base, `/v1/counters?page=${p}&raw=true`);
    expect(raw.body).toMatchObject({ pages: [{ page, viewers: { dc1: { p: 1, n: 0 } } }] });
    const first = await call(base, "/v1/counters?prefix=openapi&limit=1");
    const cursor = (first.body as { cursor: string | null }).cursor;
    expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/);
    const last = await call(base, `/v1/counters?prefix=openapi&limit=1&cursor=${cursor}&raw=true`);
    expect((last.body as { cursor: string | null }).cursor).toBeNull();
    expect((await call(base, "/v1/counters?prefix=openapi", { key: null })).status).toBe(401);
    expect((await call(base, "/v1/counters?page=openapi-private-1", { key: null })).status).toBe(401);
    expect((await call(base, "/v1/counters")).status).toBe(400);
    expect((await call(base, "/v1/counters?prefix=a&limit=1000")).status).toBe(400);

    // The status API (admin key only): the DC, one page with raw entries and tombstones, listings.
    const status = await call(base, "/v1/admin/status", { key: TEST_ADMIN_KEY });
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({
      dc: "dc1",
      nodes: [{ ready: true, partitions: expect.any(Array) }],
      gateways: [{ sockets: expect.any(Number) }],
      dcs: [{ dc: "dc1", local: true, live: true }],
    });
    expect((await call(base, "/v1/admin/status")).status).toBe(401);
    const adminPages = await call(base, "/v1/admin/pages?prefix=openapi%2F&limit=1", { key: TEST_ADMIN_KEY });
    expect(adminPages.body).toMatchObject({ pages: [{ page }] });
    expect((await call(base, "/v1/admin/pages?limit=1000", { key: TEST_ADMIN_KEY })).status).toBe(400);
    expect((await call(base, "/v1/admin/pages", { key: null })).status).toBe(401);
    const adminPage = await call(base, `/v1/admin/pages/${p}`, { key: TEST_ADMIN_KEY });
    expect(adminPage.body).toMatchObject({
      page,
      viewers_by_dc: { dc1: { p: 1, n: 0, live: true } },
      counters: expect.arrayContaining([
        expect.objectContaining({
          name: "gone",
          deleted: true,
          value: 0,
          tombstone: { dc1: expect.anything() },
        }),
      ]),
    });
    expect((await call(base, "/v1/admin/pages/a%20b", { key: TEST_ADMIN_KEY })).status).toBe(400);
    expect((await call(base, `/v1/admin/pages/${p}`)).status).toBe(401);
    // The console deletes with the admin key.
    const adminDelete = await call(base, `/v1/pages/${p}/counters/stock`, {
      method: "DELETE",
      key: TEST_ADMIN_KEY,
    });
    expect(adminDelete.body).toMatchObject({ page, counter: "stock", deleted: true });
    // Purging: the counter just deleted goes (its only entry nets to zero), and the console no longer lists it.
    const purge = await call(base, "/v1/admin/purge", {
      method: "POST",
      key: TEST_ADMIN_KEY,
      body: { older_than_s: 0 },
    });
    expect(purge.status).toBe(200);
    expect(purge.body).toMatchObject({ older_than_s: 0, failed: 0 });
    expect((purge.body as { counters: number }).counters).toBeGreaterThanOrEqual(1);
    const purgedPage = await call(base, `/v1/admin/pages/${p}`, { key: TEST_ADMIN_KEY });
    expect(
      (purgedPage.body as { counters: Array<{ name: string }> }).counters.map((c) => c.name),
    ).not.toContain("stock");
    for (const body of [
      {},
      { older_than_s: -1 },
      { older_than_s: 1.5 },
      { older_than_s: 315_360_001 },
      { older_than_s: 0, age: 1 },
      [],
    ])
      expect(
        (await call(base, "/v1/admin/purge", { method: "POST", key: TEST_ADMIN_KEY, body })).status,
      ).toBe(400);
    expect((await call(base, "/v1/admin/purge", { method: "POST", body: { older_than_s: 0 } })).status).toBe(
      401,
    );
    expect(
      (await call(base, "/v1/admin/purge", { key: TEST_ADMIN_KEY, fallback: "MethodNotAllowed" })).status,
    ).toBe(405);
    const huge = { older_than_s: 0, pad: "x".repeat(70_000) };
    expect(
      (await call(base, "/v1/admin/purge", { method: "POST", key: TEST_ADMIN_KEY, body: huge })).status,
    ).toBe(413);

    // A delete of a counter that never existed leaves nothing to show.
    const ghost = await call(base, `/v1/pages/${p}/counters/never-was`, {
      method: "DELETE",
      key: TEST_ADMIN_KEY,
    });
    expect(ghost.status).toBe(200);
    const afterGhost = await call(base, `/v1/admin/pages/${p}`, { key: TEST_ADMIN_KEY });
    expect(
      (afterGhost.body as { counters: Array<{ name: string }> }).counters.map((c) => c.name),
    ).not.toContain("never-was");
    // The admin listing takes page= as /v1/counters does.
    const listedPage = await call(base, `/v1/admin/pages?page=${p}`, { key: TEST_ADMIN_KEY });
    expect(listedPage.body).toMatchObject({ pages: [{ page }] });

    // Routes and methods that do not exist.
    for (const path of ["/healthz", "/readyz", "/metrics"])
      expect(
        (await call(base, path, { method: "POST", key: TEST_ADMIN_KEY, fallback: "MethodNotAllowed" }))
          .status,
      ).toBe(405);
    expect((await call(base, "/v1/nothing", { fallback: "NotFound" })).status).toBe(404);
    expect((await call(base, "/v1/counters", { method: "POST", fallback: "MethodNotAllowed" })).status).toBe(
      405,
    );
    expect((await call(base, "/v1/counters/increment", { fallback: "MethodNotAllowed" })).status).toBe(405);
    expect(
      (await call(base, `/v1/pages/${p}/counter`, { method: "DELETE", fallback: "MethodNotAllowed" })).status,
    ).toBe(405);
    expect((await call(base, `/v1/pages/${p}/counters/likes`, { fallback: "MethodNotAllowed" })).status).toBe(
      405,
    );

    // 429 with Retry-After, for every change, from a key over its rate, and for reads without a key
    // from an address over its read budget.
    const lim = limited.url;
    expect((await call(lim, `/v1/pages/${p}/counter`, { key: null })).status).toBe(200);
    expect((await call(lim, `/v1/pages/${p}/counter`, { key: null })).status).toBe(429);
    expect((await call(lim, `/v1/counters?page=${p}`, { key: null })).status).toBe(429);
    expect((await call(lim, `/v1/pages/${p}/stats`, { key: null })).status).toBe(429);
    expect((await call(lim, `/v1/pages/${p}/counters/likes/window?seconds=60`, { key: null })).status).toBe(
      429,
    );
    expect((await stream(lim, `/v1/pages/${p}/events`, null)).status).toBe(429);
    // The gateway's connections are full (one here): a stream is 503 with Retry-After.
    const held = await stream(lim, `/v1/pages/${p}/events`);
    expect((await stream(lim, `/v1/pages/${p}/events`)).status).toBe(503);
    held.close();
    await call(lim, `/v1/pages/${p}/counter`, { method: "PUT", body: change });
    expect((await call(lim, `/v1/pages/${p}/counter`, { method: "PUT", body: change })).status).toBe(429);
    expect((await call(lim, "/v1/counters/increment", { method: "POST", body: batch })).status).toBe(429);
    expect((await call(lim, `/v1/pages/${p}/counters/likes`, { method: "DELETE" })).status).toBe(429);
    expect((await call(lim, `/v1/pages/${p}/counters/likes/reset`, { method: "POST" })).status).toBe(429);
    // Probes without a key spend the address's request budget like any request: past it, 429.
    let probe = 200;
    for (let i = 0; i < 100 && probe !== 429; i++)
      probe = (await call(lim, "/healthz", { key: null })).status;
    expect(probe).toBe(429);
    expect((await call(lim, "/readyz", { key: null })).status).toBe(429);

    // 503 with Retry-After once no counter node is live; the batch answers per item.
    await platform.app.counter.stop();
    await eventually(async () => expect((await call(base, "/readyz")).status).toBe(503), {
      timeoutMs: 10_000,
    });
    expect((await call(base, `/v1/pages/${p}/counter`)).status).toBe(503);
    expect((await call(base, `/v1/pages/${p}/counter`, { method: "PUT", body: change })).status).toBe(503);
    expect((await call(base, `/v1/pages/${p}/counters/likes`, { method: "DELETE" })).status).toBe(503);
    expect((await call(base, `/v1/pages/${p}/counters/likes/reset`, { method: "POST" })).status).toBe(503);
    expect((await call(base, `/v1/counters?page=${p}`)).status).toBe(503);
    expect((await call(base, `/v1/pages/${p}/counters/likes/window?seconds=60`)).status).toBe(503);
    expect((await call(base, `/v1/pages/${p}/stats`)).status).toBe(503);
    expect((await call(base, "/v1/counters?prefix=openapi")).status).toBe(503);
    expect((await call(base, "/v1/admin/pages?prefix=openapi", { key: TEST_ADMIN_KEY })).status).toBe(503);
    expect((await call(base, `/v1/admin/pages/${p}`, { key: TEST_ADMIN_KEY })).status).toBe(503);
    // With no counter node, the status still answers: it is most needed when something is down.
    expect((await call(base, "/v1/admin/status", { key: TEST_ADMIN_KEY })).body).toMatchObject({ nodes: [] });
    const unavailable = await call(base, "/v1/counters/increment", { method: "POST", body: batch });
    expect(unavailable.body).toMatchObject({ results: [{ error: { code: "unavailable" } }, {}, {}, {}] });

    const missing = doc.documented.filter((answer) => !NOT_PROVOKED.test(answer) && !doc.seen.has(answer));
    expect(missing).toEqual([]);
    expect(doc.seen.has("NotFound") && doc.seen.has("MethodNotAllowed")).toBe(true);
  });
});
