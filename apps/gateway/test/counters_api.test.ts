/**
 * The publisher API of protocol v1 against a real gateway (uWS on a free port, counter node,
 * in-memory bus and store): batches of increments, reads of many pages and by prefix, resets and
 * deletes, auth, method and validation errors. Plain HTTP, no SDK.
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { mulberry32, testSeed } from "../../../test/support/prng.js";
import { RedisServer, describeWithRedis } from "../../../test/support/redis_server.js";
import {
  PublisherHttp,
  counterPath,
  type BatchItem,
  type ErrorBody,
  type PageRaw,
  type ResetBody,
} from "../../../test/support/publisher_http.js";

const MAX_BATCH_ITEMS = 1000;
const MAX_READ_PAGES = 100;

function codeOf(body: unknown): string | undefined {
  return (body as Partial<ErrorBody>).error?.code;
}

describe("gateway - publisher API", () => {
  let platform: TestPlatform;
  let api: PublisherHttp;

  beforeAll(async () => {
    platform = await TestPlatform.start();
    api = new PublisherHttp(platform.url, TEST_PUBLISHER_KEY);
  });

  afterAll(async () => {
    await platform?.close();
  });

  describe("batches", () => {
    test("batch - applies each item once by its id and answers per item, in order", async () => {
      const items: BatchItem[] = [
        { page: "batch-a", counter: "likes", change: 1, id: "i1" },
        { page: "batch-a", counter: "likes", change: 2, id: "i2" },
        { page: "batch-b", counter: "stock", change: -3, id: "i3" },
        { page: "batch-a", counter: "likes", change: 1, id: "i1" },
        { page: "batch-a", counter: "shares", change: 5, id: "i1" },
        // Ids are scoped to their page: the same id on another page is another change.
        { page: "batch-c", counter: "likes", change: 4, id: "i1" },
      ];
      const res = await api.batch(items);
      expect(res.status).toBe(200);
      expect(res.headers.get("cache-control")).toBe("no-store");
      const results = res.body.results;
      expect(results.map((r) => [r.page, r.counter, r.id])).toEqual(
        items.map((i) => [i.page, i.counter, i.id]),
      );
      expect(results[0]).toMatchObject({ duplicate: false });
      expect(results[1]).toMatchObject({ duplicate: false });
      // Items of one batch apply in parallel: whichever went second saw the other.
      expect(Math.max(...[results[0]!, results[1]!].map((r) => ("value" in r ? r.value : NaN)))).toBe(3);
      expect(results[2]).toMatchObject({ value: -3, duplicate: false });
      expect(results[3]).toEqual({ ...results[0], duplicate: true });
      expect(results[4]).toMatchObject({ error: { code: "idempotency_conflict" } });
      expect(results[5]).toMatchObject({ value: 4, duplicate: false });
      for (const r of results) if ("value" in r) expect(r.updated_at).toBeGreaterThan(0);
      expect(await api.counters("batch-a")).toEqual({ likes: 3 });
      expect(await api.counters("batch-b")).toEqual({ stock: -3 });
      expect(await api.counters("batch-c")).toEqual({ likes: 4 });
    });

    test("batch - a retried batch counts nothing again and answers the original values as duplicates", async () => {
      const items: BatchItem[] = Array.from({ length: 20 }, (_, i) => ({
        page: `batch-retry-${i % 3}`,
        counter: i % 2 === 0 ? "likes" : "claps",
        change: i + 1,
        id: `retry-${i}`,
      }));
      const first = await api.batch(items);
      const again = await api.batch(items);
      expect(again.status).toBe(200);
      expect(again.body.results).toEqual(first.body.results.map((r) => ({ ...r, duplicate: true })));
      const expected = new Map<string, number>();
      for (const i of items)
        expected.set(`${i.page}/${i.counter}`, (expected.get(`${i.page}/${i.counter}`) ?? 0) + i.change);
      for (const [key, value] of expected) {
        const [page, counter] = key.split("/") as [string, string];
        expect((await api.counters(page))[counter]).toBe(value);
      }
    });

    test("batch - a batch id already used by PUT is a duplicate of it when the change is the same", async () => {
      const put = await api.change("batch-put", "likes", 2, "shared-key");
      expect(put.status).toBe(200);
      const res = await api.batch([
        { page: "batch-put", counter: "likes", change: 2, id: "shared-key" },
        { page: "batch-put", counter: "likes", change: 3, id: "shared-key" },
      ]);
      expect(res.body.results[0]).toMatchObject({ value: 2, duplicate: true });
      expect(res.body.results[1]).toMatchObject({ error: { code: "idempotency_conflict" } });
      expect(await api.counters("batch-put")).toEqual({ likes: 2 });
    });

    test("batch - 1000 items over 50 pages apply in one request", async () => {
      const items: BatchItem[] = Array.from({ length: MAX_BATCH_ITEMS }, (_, i) => ({
        page: `batch-wide-${i % 50}`,
        counter: "likes",
        change: 1,
        id: `wide-${i}`,
      }));
      const res = await api.batch(items);
      expect(res.status).toBe(200);
      expect(res.body.results.every((r) => "value" in r && !r.duplicate)).toBe(true);
      const totals = await api.totals(...Array.from({ length: 50 }, (_, i) => `batch-wide-${i}`));
      expect(totals.map((t) => t.counters.likes)).toEqual(Array(50).fill(MAX_BATCH_ITEMS / 50));
    });

    test("batch - a malformed body is rejected whole with 400 and a stable code, changing nothing", async () => {
      const page = "batch-bad";
      const ok = { page, counter: "likes", change: 1, id: "ok-1" };
      const cases: ReadonlyArray<[string, unknown, string]> = [
        ["empty body", "", "invalid_body"],
        ["not JSON", "[{", "invalid_body"],
        ["an object", ok, "invalid_body"],
        ["an empty array", [], "invalid_body"],
        ["an item that is not an object", [ok, 1], "invalid_body"],
        ["an item that is an array", [[page, "likes", 1, "x"]], "invalid_body"],
        ["a bad page", [ok, { ...ok, page: "a b" }], "invalid_page"],
        ["a missing page", [{ counter: "likes", change: 1, id: "x" }], "invalid_page"],
        ["a page of 129 characters", [{ ...ok, page: "p".repeat(129) }], "invalid_page"],
        ["a bad counter", [{ ...ok, counter: "my likes" }], "invalid_counter"],
        ["the presence counter", [{ ...ok, counter: "@viewers" }], "invalid_counter"],
        ["a tombstone counter", [{ ...ok, counter: "@del:likes" }], "invalid_counter"],
        ["a zero change", [ok, { ...ok, id: "z", change: 0 }], "invalid_body"],
        ["a fractional change", [{ ...ok, change: 1.5 }], "invalid_body"],
        ["a change over 10^9", [{ ...ok, change: 1_000_000_001 }], "invalid_body"],
        ["a change under -10^9", [{ ...ok, change: -1_000_000_001 }], "invalid_body"],
        ["a change as a string", [{ ...ok, change: "1" }], "invalid_body"],
        ["a missing change", [{ page, counter: "likes", id: "x" }], "invalid_body"],
        ["a missing id", [{ page, counter: "likes", change: 1 }], "invalid_idempotency_key"],
        ["an id of 129 characters", [{ ...ok, id: "k".repeat(129) }], "invalid_idempotency_key"],
        ["an id with a space", [ok, { ...ok, id: "k y" }], "invalid_idempotency_key"],
      ];
      for (const [name, body, code] of cases) {
        const res = await api.batch(body);
        expect(res.status, name).toBe(400);
        expect(codeOf(res.body), name).toBe(code);
        expect(typeof res.body.error?.message, name).toBe("string");
      }
      expect(await api.counters(page)).toEqual({});
    });

    test("batch - more than 1000 items, or a body over 1 MiB, is 413 payload_too_large and changes nothing", async () => {
      const page = "batch-oversize";
      const items = Array.from({ length: MAX_BATCH_ITEMS + 1 }, (_, i) => ({
        page,
        counter: "likes",
        change: 1,
        id: `o-${i}`,
      }));
      const tooMany = await api.batch(items);
      expect(tooMany.status).toBe(413);
      expect(codeOf(tooMany.body)).toBe("payload_too_large");
      const huge = JSON.stringify([
        { page, counter: "likes", change: 1, id: "big", pad: "x".repeat(1024 * 1024) },
      ]);
      const tooBig = await api.batch(huge);
      expect(tooBig.status).toBe(413);
      expect(codeOf(tooBig.body)).toBe("payload_too_large");
      expect(await api.counters(page)).toEqual({});
      expect((await fetch(`${platform.url}/healthz`)).status).toBe(200);
    });
  });

  describe("reads", () => {
    test("read - GET /v1/counters sums each page in the order asked, raw=true shows each DC's {p,n}", async () => {
      await api.batch([
        { page: "read-a", counter: "likes", change: 5, id: "r1" },
        { page: "read-a", counter: "likes", change: -2, id: "r2" },
        { page: "read-b", counter: "claps", change: 1, id: "r3" },
      ]);
      const viewer = await platform.connect();
      viewer.join("read-a", "reader-1");
      await platform.waitForViewers("read-a", 1);
      const res = await api.read("page=read-b&page=read-a&page=read-none&page=read-a");
      expect(res.status).toBe(200);
      expect(res.headers.get("cache-control")).toBe("no-store");
      expect(res.body.pages.map((p) => p.page)).toEqual(["read-b", "read-a", "read-none"]);
      expect(res.body.pages[0]).toMatchObject({ counters: { claps: 1 }, viewers: 0, count: 0 });
      expect(res.body.pages[1]).toMatchObject({ counters: { likes: 3 }, viewers: 1, count: 1 });
      expect(res.body.pages[2]).toMatchObject({ counters: {}, viewers: 0, count: 0 });
      const raw = await api.read<{ pages: PageRaw[] }>("page=read-a&raw=true");
      expect(raw.status).toBe(200);
      expect(raw.body.pages[0]).toMatchObject({
        page: "read-a",
        viewers: { dc1: { p: 1, n: 0 } },
        counters: { likes: { dc1: { p: 5, n: 2 } } },
      });
    });

    test("read - a bad query is 400 with invalid_query or invalid_page", async () => {
      const pages = Array.from({ length: MAX_READ_PAGES + 1 }, (_, i) => `page=p${i}`).join("&");
      const cases: ReadonlyArray<[string, string]> = [
        ["", "invalid_query"],
        ["raw=true", "invalid_query"],
        ["page=a&prefix=a", "invalid_query"],
        [pages, "invalid_query"],
        ["page=a%20b", "invalid_page"],
        ["page=", "invalid_page"],
        ["page=a&raw=yes", "invalid_query"],
        ["prefix=a%20", "invalid_query"],
        [`prefix=${"p".repeat(129)}`, "invalid_query"],
        ["prefix=a&limit=0", "invalid_query"],
        [`prefix=a&limit=${MAX_READ_PAGES + 1}`, "invalid_query"],
        ["prefix=a&limit=ten", "invalid_query"],
        ["prefix=a&cursor=!!", "invalid_query"],
        [`prefix=a&cursor=${Buffer.from("a b").toString("base64url")}`, "invalid_query"],
      ];
      for (const [query, code] of cases) {
        const res = await api.read(query);
        expect(res.status, query).toBe(400);
        expect(codeOf(res.body), query).toBe(code);
      }
    });

    test("prefix - pages through ids with odd characters in byte order, without duplicates or gaps", async () => {
      const prefix = "odd/";
      const odd = [
        "%",
        "%25",
        "?x=1&y=2",
        "#frag",
        "+plus",
        "a/b/c",
        "~",
        '"q"',
        "'",
        "\\",
        "<>",
        "[]",
        "{}",
        "é",
      ];
      const ids = [...new Set(odd.map((s) => `${prefix}${s}`).filter((id) => /^[\x21-\x7e]+$/.test(id)))];
      for (let i = 0; i < 12; i++) ids.push(`${prefix}n${i}`);
      // Neighbours that must not leak into the listing.
      const outside = ["odd", "odd.", "odd0", "odc/x", "oddity"];
      const items = [...ids, ...outside].map((page, i) => ({
        page,
        counter: "likes",
        change: i + 1,
        id: `odd-${i}`,
      }));
      expect((await api.batch(items)).status).toBe(200);
      const seen: string[] = [];
      const values = new Map<string, number>();
      let cursor: string | null | undefined;
      let requests = 0;
      do {
        const query = `prefix=${encodeURIComponent(prefix)}&limit=4${cursor ? `&cursor=${cursor}` : ""}`;
        const res = await api.read(query);
        expect(res.status, query).toBe(200);
        expect(res.body.pages.length).toBeLessThanOrEqual(4);
        for (const p of res.body.pages) {
          seen.push(p.page);
          values.set(p.page, p.counters.likes!);
        }
        cursor = res.body.cursor ?? null;
        expect(cursor === null || /^[A-Za-z0-9_-]+$/.test(cursor)).toBe(true);
        requests++;
      } while (cursor !== null && requests < 50);
      const sorted = [...ids].sort((a, b) => (Buffer.from(a) < Buffer.from(b) ? -1 : 1));
      expect(seen).toEqual(sorted);
      expect(requests).toBe(Math.ceil(ids.length / 4));
      for (const item of items) if (values.has(item.page)) expect(values.get(item.page)).toBe(item.change);
      // A listing in one go agrees; an empty prefix under nothing lists nothing.
      const whole = await api.read(`prefix=${encodeURIComponent(prefix)}&limit=100`);
      expect(whole.body.pages.map((p) => p.page)).toEqual(sorted);
      expect(whole.body.cursor).toBeNull();
      const none = await api.read("prefix=no-such-prefix-");
      expect(none.body).toEqual({ pages: [], cursor: null });
    });

    test("prefix - raw=true lists each page's per-DC entries", async () => {
      await api.batch([{ page: "rawlist-1", counter: "likes", change: 2, id: "rl" }]);
      const res = await api.read<{ pages: PageRaw[]; cursor: string | null }>("prefix=rawlist-&raw=true");
      expect(res.body.pages).toEqual([
        expect.objectContaining({
          page: "rawlist-1",
          viewers: {},
          counters: { likes: { dc1: { p: 2, n: 0 } } },
        }),
      ]);
    });
  });

  describe("resets", () => {
    test("reset - sets a counter to zero and answers the value it cancelled", async () => {
      const page = "reset-basic";
      await api.batch([
        { page, counter: "unread", change: 7, id: "u1" },
        { page, counter: "other", change: 1, id: "u2" },
      ]);
      const res = await api.reset(page, "unread", { idempotencyKey: "read-all-1" });
      expect(res.status).toBe(200);
      expect(res.headers.get("idempotent-replayed")).toBeNull();
      expect(res.body).toMatchObject({ page, counter: "unread", value: 0, previous: 7 });
      expect(res.body.deleted).toBeUndefined();
      expect(await api.counters(page)).toEqual({ unread: 0, other: 1 });
      // A reset counter is still there (at zero) and counts on.
      await api.change(page, "unread", 2);
      expect(await api.counters(page)).toEqual({ unread: 2, other: 1 });
    });

    test("reset - a retry with the same key answers the original, even after the value changed", async () => {
      const page = "reset-retry";
      await api.change(page, "unread", 4);
      const first = await api.reset(page, "unread", { idempotencyKey: "reset-key" });
      await api.change(page, "unread", 3);
      const retry = await api.reset(page, "unread", { idempotencyKey: "reset-key" });
      expect(retry.status).toBe(200);
      expect(retry.body).toEqual(first.body);
      expect(retry.headers.get("idempotent-replayed")).toBe("true");
      expect(await api.counters(page)).toEqual({ unread: 3 });
      // The key is the reset's: reused for an increment, or for a delete, it conflicts.
      const asIncrement = await api.change(page, "unread", 1, "reset-key");
      expect(asIncrement.status).toBe(409);
      expect(codeOf(asIncrement.body)).toBe("idempotency_conflict");
      const asDelete = await api.remove(page, "unread", { idempotencyKey: "reset-key" });
      expect(asDelete.status).toBe(409);
      expect(await api.counters(page)).toEqual({ unread: 3 });
    });
  });

  describe("deletes", () => {
    test("delete - hides the counter from reads, listings and count frames; a later increment revives it from zero", async () => {
      const page = "del-basic";
      await api.batch([
        { page, counter: "likes", change: 5, id: "d1" },
        { page, counter: "shares", change: 2, id: "d2" },
      ]);
      const watcher = await platform.watcher(page);
      await expect.poll(() => watcher.lastCount(page)?.counters).toEqual({ likes: 5, shares: 2 });

      const del = await api.remove(page, "likes", { idempotencyKey: "del-1" });
      expect(del.status).toBe(200);
      expect(del.body).toMatchObject({ page, counter: "likes", value: 0, previous: 5, deleted: true });
      expect(await api.counters(page)).toEqual({ shares: 2 });
      expect((await platform.counter(page)).counters).toEqual({ shares: 2 });
      await expect.poll(() => watcher.lastCount(page)?.counters).toEqual({ shares: 2 });
      const raw = await api.read<{ pages: PageRaw[] }>(`page=${page}&raw=true`);
      expect(Object.keys(raw.body.pages[0]!.counters)).toEqual(["shares"]);
      const listed = await api.read(`prefix=${page}`);
      expect(listed.body.pages[0]?.counters).toEqual({ shares: 2 });
      // A late watcher never sees it either.
      const late = await platform.watcher(page);
      expect(late.lastCount(page)?.counters).toEqual({ shares: 2 });

      const revived = await api.change(page, "likes", 1);
      expect(revived.body).toMatchObject({ value: 1 });
      expect(await api.counters(page)).toEqual({ likes: 1, shares: 2 });
      await expect.poll(() => watcher.lastCount(page)?.counters).toEqual({ likes: 1, shares: 2 });
      // Never an internal counter anywhere.
      for (const frame of watcher.received) {
        if (frame.frame.type === "count")
          expect(Object.keys(frame.frame.counters).some((k) => k.startsWith("@"))).toBe(false);
      }
    });

    test("delete - a decrement revives a deleted counter too, below zero", async () => {
      const page = "del-decrement";
      await api.change(page, "stock", 3);
      await api.remove(page, "stock");
      await api.change(page, "stock", -2);
      expect(await api.counters(page)).toEqual({ stock: -2 });
    });

    test("delete - is idempotent by key: a retry answers the original even after a revival; a new key deletes again", async () => {
      const page = "del-idem";
      await api.change(page, "likes", 4);
      const first = await api.remove(page, "likes", { idempotencyKey: "del-key" });
      await api.change(page, "likes", 2);
      const retry = await api.remove(page, "likes", { idempotencyKey: "del-key" });
      expect(retry.status).toBe(200);
      expect(retry.body).toEqual(first.body);
      expect(retry.headers.get("idempotent-replayed")).toBe("true");
      expect(await api.counters(page)).toEqual({ likes: 2 });
      const again = await api.remove(page, "likes", { idempotencyKey: "del-key-2" });
      expect(again.body).toMatchObject({ previous: 2, deleted: true });
      expect(await api.counters(page)).toEqual({});
      // Deleting what is already deleted changes nothing and hides nothing else.
      const twice = await api.remove(page, "likes", { idempotencyKey: "del-key-3" });
      expect(twice.body).toMatchObject({ previous: 0 });
      await api.change(page, "likes", 1);
      expect(await api.counters(page)).toEqual({ likes: 1 });
    });

    test("delete - a counter that never existed can be deleted and stays away until used", async () => {
      const page = "del-never";
      await api.change(page, "likes", 1);
      const res = await api.remove(page, "ghost");
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ previous: 0, deleted: true });
      expect(await api.counters(page)).toEqual({ likes: 1 });
      await api.change(page, "ghost", 3);
      expect(await api.counters(page)).toEqual({ likes: 1, ghost: 3 });
    });

    test("delete - a reset of a deleted counter keeps it hidden", async () => {
      const page = "del-then-reset";
      await api.change(page, "unread", 5);
      await api.remove(page, "unread");
      const reset = await api.reset(page, "unread");
      expect(reset.body).toMatchObject({ previous: 0 });
      expect(await api.counters(page)).toEqual({});
    });

    test("delete and reset - internal counter names and bad ids in the path are 400", async () => {
      const cases: ReadonlyArray<[string, string, string]> = [
        ["DELETE", "/v1/pages/p/counters/%40viewers", "invalid_counter"],
        ["DELETE", "/v1/pages/p/counters/%40del%3Alikes", "invalid_counter"],
        ["POST", "/v1/pages/p/counters/%40viewers/reset", "invalid_counter"],
        ["DELETE", `/v1/pages/p/counters/${"c".repeat(65)}`, "invalid_counter"],
        ["DELETE", "/v1/pages/p/counters/%zz", "invalid_counter"],
        ["DELETE", "/v1/pages/a%20b/counters/likes", "invalid_page"],
        ["POST", "/v1/pages/%zz/counters/likes/reset", "invalid_page"],
      ];
      for (const [method, path, code] of cases) {
        const res = await api.request(method, path);
        expect(res.status, `${method} ${path}`).toBe(400);
        expect(codeOf(res.body), `${method} ${path}`).toBe(code);
      }
      for (const idempotencyKey of ["k".repeat(129), ""]) {
        const badKey = await api.remove("p", "likes", { idempotencyKey });
        expect(badKey.status, `key of ${idempotencyKey.length}`).toBe(400);
        expect(codeOf(badKey.body)).toBe("invalid_idempotency_key");
      }
    });

    test("delete and reset - page ids with '/', '?', '%' and '#' work percent-encoded", async () => {
      const page = "a/b?c%d#e-del";
      await api.change(page, "likes", 2);
      expect((await api.reset(page, "likes")).body).toMatchObject({ page, previous: 2 });
      expect((await api.remove(page, "likes")).body).toMatchObject({ page, deleted: true });
      expect(await api.counters(page)).toEqual({});
    });
  });

  describe("auth and methods", () => {
    test("auth - every change without a valid publisher key is 401 unauthorized and changes nothing", async () => {
      const page = "auth-all";
      await api.change(page, "likes", 3);
      const keys: Array<string | null> = [null, "", "wrong-key-123456", `${TEST_PUBLISHER_KEY}x`];
      const calls = (key: string | null) => [
        api.batch([{ page, counter: "likes", change: 1, id: `a-${key}` }], { key }),
        api.reset(page, "likes", { key }),
        api.remove(page, "likes", { key }),
        api.request("PUT", `/v1/pages/${page}/counter`, {
          key,
          body: { action: "increment", counter: "likes" },
        }),
      ];
      for (const key of keys) {
        for (const res of await Promise.all(calls(key))) {
          expect(res.status, String(key)).toBe(401);
          expect(codeOf(res.body)).toBe("unauthorized");
        }
      }
      const basic = await api.request("DELETE", counterPath(page, "likes"), {
        key: null,
        headers: { authorization: `Basic ${Buffer.from(`u:${TEST_PUBLISHER_KEY}`).toString("base64")}` },
      });
      expect(basic.status).toBe(401);
      expect(await api.counters(page)).toEqual({ likes: 3 });
      // Reads need no key.
      expect((await api.read(`page=${page}`)).status).toBe(200);
    });

    test("methods - a wrong method on a publisher route is 405 method_not_allowed", async () => {
      // Each with the methods its Allow header must name (RFC 9110); a GET route serves HEAD too.
      const cases: ReadonlyArray<[string, string, string]> = [
        ["GET", "/v1/counters/increment", "POST"],
        ["PUT", "/v1/counters/increment", "POST"],
        ["POST", "/v1/counters", "GET, HEAD"],
        ["DELETE", "/v1/counters", "GET, HEAD"],
        ["GET", "/v1/pages/p/counters/likes", "DELETE"],
        ["POST", "/v1/pages/p/counters/likes", "DELETE"],
        ["GET", "/v1/pages/p/counters/likes/reset", "POST"],
        ["DELETE", "/v1/pages/p/counters/likes/reset", "POST"],
        ["DELETE", "/v1/pages/p/counter", "GET, HEAD, PUT"],
      ];
      for (const [method, path, allow] of cases) {
        const res = await api.request(method, path);
        expect(res.status, `${method} ${path}`).toBe(405);
        expect(codeOf(res.body)).toBe("method_not_allowed");
        expect(res.headers.get("allow"), `${method} ${path}`).toBe(allow);
      }
      const missing = await api.request("GET", "/v1/pages/p/counters");
      expect(missing.status).toBe(404);
      expect(codeOf(missing.body)).toBe("not_found");
    });
  });
});

describe("gateway - publisher rate limits", () => {
  const OTHER_KEY = "second-publisher-key-02";
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_PUBLISHER_KEYS: `${TEST_PUBLISHER_KEY},${OTHER_KEY}`,
      LIVECOUNT_PUBLISHER_RATE: "1",
      LIVECOUNT_PUBLISHER_BURST: "3",
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("rate limit - a key past its burst gets 429 rate_limited with Retry-After; other keys and reads go on", async () => {
    const api = new PublisherHttp(platform.url, TEST_PUBLISHER_KEY);
    const other = new PublisherHttp(platform.url, OTHER_KEY);
    const page = "rate-limited";
    const answers = [];
    for (let i = 0; i < 5; i++) answers.push(await api.change(page, "likes", 1, `rl-${i}`));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 429, 429]);
    const limited = answers[3]!;
    expect(codeOf(limited.body)).toBe("rate_limited");
    const retryAfter = Number(limited.headers.get("retry-after"));
    expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 2).toBe(true);
    // Every kind of change costs a token, and a refused one changes nothing.
    expect((await api.batch([{ page, counter: "likes", change: 1, id: "rl-b" }])).status).toBe(429);
    expect((await api.reset(page, "likes")).status).toBe(429);
    expect((await api.remove(page, "likes")).status).toBe(429);
    expect((await other.change(page, "likes", 1, "other-1")).status).toBe(200);
    for (let i = 0; i < 10; i++) expect((await api.read(`page=${page}`)).status).toBe(200);
    expect(await api.counters(page)).toEqual({ likes: 4 });
    // An unknown key is refused as unauthorized, never rate limited.
    const unknown = new PublisherHttp(platform.url, "unknown-key-00000");
    expect((await unknown.change(page, "likes", 1)).status).toBe(401);
  });
});

/**
 * Increments (+1 each, three workers) race resets (some sent twice at once under one key). Every
 * increment's answer is its position in the run of increments since the last reset, so with one
 * owner applying everything in one order the answers are exactly the runs 1..previous of each
 * reset and 1..final after the last one: a reset that cancelled a stale value, or counted twice,
 * breaks the runs.
 */
async function raceResetsWithIncrements(api: PublisherHttp, page: string): Promise<void> {
  const random = mulberry32(testSeed(`reset race on ${page}`));
  const answers: number[] = [];
  const increments = async (worker: number): Promise<void> => {
    for (let i = 0; i < 80; i++) {
      const res = await api.change(page, "unread", 1, `inc-${worker}-${i}`);
      expect(res.status).toBe(200);
      answers.push((res.body as { value: number }).value);
    }
  };
  const resets = new Map<string, ResetBody>();
  const resetter = async (): Promise<void> => {
    for (let i = 0; i < 30; i++) {
      const key = `reset-${i}`;
      const sent = await Promise.all(
        Array.from({ length: random.chance(0.3) ? 2 : 1 }, () =>
          api.reset(page, "unread", { idempotencyKey: key }),
        ),
      );
      for (const a of sent) expect(a.status).toBe(200);
      expect(new Set(sent.map((a) => a.body.previous)).size).toBe(1);
      resets.set(key, sent[0]!.body);
      if (random.chance(0.5)) await new Promise((r) => setImmediate(r));
    }
  };
  await Promise.all([increments(1), increments(2), increments(3), resetter()]);
  const final = (await api.counters(page)).unread!;
  const runs = [...[...resets.values()].map((r) => r.previous), final];
  const expected = runs.flatMap((n) => Array.from({ length: n }, (_, i) => i + 1));
  const sort = (xs: number[]): number[] => [...xs].sort((a, b) => a - b);
  expect(answers).toHaveLength(3 * 80);
  expect(sort(answers)).toEqual(sort(expected));
  // The race did race: resets cancelled increments made between them.
  expect(runs.filter((n) => n > 0).length).toBeGreaterThan(5);
}

describe("gateway - resets racing increments", () => {
  test("reset - racing increments on the in-memory store: each reset cancels exactly the increments since the one before", async () => {
    const platform = await TestPlatform.start();
    try {
      await raceResetsWithIncrements(new PublisherHttp(platform.url, TEST_PUBLISHER_KEY), "race-memory");
    } finally {
      await platform.close();
    }
  });
});

describeWithRedis("gateway - resets racing increments on redis", () => {
  let redis: RedisServer;

  beforeAll(async () => {
    redis = await RedisServer.start();
  });

  afterAll(async () => {
    await redis?.stop();
  });

  test("reset - racing increments on redis: each reset cancels exactly the increments since the one before", async () => {
    const platform = await TestPlatform.start({ LIVECOUNT_REDIS_URL: redis.url });
    try {
      await raceResetsWithIncrements(new PublisherHttp(platform.url, TEST_PUBLISHER_KEY), "race-redis");
    } finally {
      await platform.close();
    }
  });
});
