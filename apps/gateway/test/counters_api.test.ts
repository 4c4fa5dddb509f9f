/**
 * The publisher API of protocol v1 against a real gateway (uWS on a free port, counter node,
 * in-memory bus and store): batches of increments, and reads of many pages and by prefix. Plain
 * HTTP, no SDK. Resets and deletes are in counters_api_resets.test.ts; auth, methods and rate
 * limits in counters_api_access.test.ts.
 */
import { describe, expect, test } from "vitest";
import type { BatchItem, PageRaw } from "../../../test/support/publisher_http.js";
import { codeOf, publisherGateway } from "./publisher_gateway.js";

const MAX_BATCH_ITEMS = 1000;
const MAX_READ_PAGES = 100;

describe("gateway - publisher API", () => {
  const gateway = publisherGateway();

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
      const res = await gateway.api.batch(items);
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
      expect(await gateway.api.counters("batch-a")).toEqual({ likes: 3 });
      expect(await gateway.api.counters("batch-b")).toEqual({ stock: -3 });
      expect(await gateway.api.counters("batch-c")).toEqual({ likes: 4 });
    });

    test("batch - a retried batch counts nothing again and answers the original values as duplicates", async () => {
      const items: BatchItem[] = Array.from({ length: 20 }, (_, i) => ({
        page: `batch-retry-${i % 3}`,
        counter: i % 2 === 0 ? "likes" : "claps",
        change: i + 1,
        id: `retry-${i}`,
      }));
      const first = await gateway.api.batch(items);
      const again = await gateway.api.batch(items);
      expect(again.status).toBe(200);
      expect(again.body.results).toEqual(first.body.results.map((r) => ({ ...r, duplicate: true })));
      const expected = new Map<string, number>();
      for (const i of items)
        expected.set(`${i.page}/${i.counter}`, (expected.get(`${i.page}/${i.counter}`) ?? 0) + i.change);
      for (const [key, value] of expected) {
        const [page, counter] = key.split("/") as [string, string];
        expect((await gateway.api.counters(page))[counter]).toBe(value);
      }
    });

    test("batch - a batch id already used by PUT is a duplicate of it when the change is the same", async () => {
      const put = await gateway.api.change("batch-put", "likes", 2, "shared-key");
      expect(put.status).toBe(200);
      const res = await gateway.api.batch([
        { page: "batch-put", counter: "likes", change: 2, id: "shared-key" },
        { page: "batch-put", counter: "likes", change: 3, id: "shared-key" },
      ]);
      expect(res.body.results[0]).toMatchObject({ value: 2, duplicate: true });
      expect(res.body.results[1]).toMatchObject({ error: { code: "idempotency_conflict" } });
      expect(await gateway.api.counters("batch-put")).toEqual({ likes: 2 });
    });

    test("batch - 1000 items over 50 pages apply in one request", async () => {
      const items: BatchItem[] = Array.from({ length: MAX_BATCH_ITEMS }, (_, i) => ({
        page: `batch-wide-${i % 50}`,
        counter: "likes",
        change: 1,
        id: `wide-${i}`,
      }));
      const res = await gateway.api.batch(items);
      expect(res.status).toBe(200);
      expect(res.body.results.every((r) => "value" in r && !r.duplicate)).toBe(true);
      const totals = await gateway.api.totals(...Array.from({ length: 50 }, (_, i) => `batch-wide-${i}`));
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
        const res = await gateway.api.batch(body);
        expect(res.status, name).toBe(400);
        expect(codeOf(res.body), name).toBe(code);
        expect(typeof res.body.error?.message, name).toBe("string");
      }
      expect(await gateway.api.counters(page)).toEqual({});
    });

    test("batch - more than 1000 items, or a body over 1 MiB, is 413 payload_too_large and changes nothing", async () => {
      const page = "batch-oversize";
      const items = Array.from({ length: MAX_BATCH_ITEMS + 1 }, (_, i) => ({
        page,
        counter: "likes",
        change: 1,
        id: `o-${i}`,
      }));
      const tooMany = await gateway.api.batch(items);
      expect(tooMany.status).toBe(413);
      expect(codeOf(tooMany.body)).toBe("payload_too_large");
      const huge = JSON.stringify([
        { page, counter: "likes", change: 1, id: "big", pad: "x".repeat(1024 * 1024) },
      ]);
      const tooBig = await gateway.api.batch(huge);
      expect(tooBig.status).toBe(413);
      expect(codeOf(tooBig.body)).toBe("payload_too_large");
      expect(await gateway.api.counters(page)).toEqual({});
      expect((await fetch(`${gateway.platform.url}/healthz`)).status).toBe(200);
    });
  });

  describe("reads", () => {
    test("read - GET /v1/counters sums each page in the order asked, raw=true shows each DC's {p,n}", async () => {
      await gateway.api.batch([
        { page: "read-a", counter: "likes", change: 5, id: "r1" },
        { page: "read-a", counter: "likes", change: -2, id: "r2" },
        { page: "read-b", counter: "claps", change: 1, id: "r3" },
      ]);
      const viewer = await gateway.platform.connect();
      viewer.join("read-a", "reader-1");
      await gateway.platform.waitForViewers("read-a", 1);
      const res = await gateway.api.read("page=read-b&page=read-a&page=read-none&page=read-a");
      expect(res.status).toBe(200);
      expect(res.headers.get("cache-control")).toBe("no-store");
      expect(res.body.pages.map((p) => p.page)).toEqual(["read-b", "read-a", "read-none"]);
      expect(res.body.pages[0]).toMatchObject({ counters: { claps: 1 }, viewers: 0, count: 0 });
      expect(res.body.pages[1]).toMatchObject({ counters: { likes: 3 }, viewers: 1, count: 1 });
      expect(res.body.pages[2]).toMatchObject({ counters: {}, viewers: 0, count: 0 });
      const raw = await gateway.api.read<{ pages: PageRaw[] }>("page=read-a&raw=true");
      expect(raw.status).toBe(200);
      expect(raw.body.pages[0]).toMatchObject({
        page: "read-a",
        viewers: { dc1: { p: 1, n: 0 } },
        counters: { likes: { dc1: { p: 5, n: 2 } } },
      });
    });

    test("read - exactly 100 pages are read in one request, each once and in order", async () => {
      const ids = Array.from({ length: MAX_READ_PAGES }, (_, i) => `read-max-${i}`);
      const res = await gateway.api.read(ids.map((id) => `page=${id}`).join("&"));
      expect(res.status).toBe(200);
      expect(res.body.pages.map((p) => p.page)).toEqual(ids);
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
        const res = await gateway.api.read(query);
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
      expect((await gateway.api.batch(items)).status).toBe(200);
      const seen: string[] = [];
      const values = new Map<string, number>();
      let cursor: string | null | undefined;
      let requests = 0;
      do {
        const query = `prefix=${encodeURIComponent(prefix)}&limit=4${cursor ? `&cursor=${cursor}` : ""}`;
        const res = await gateway.api.read(query);
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
      const whole = await gateway.api.read(`prefix=${encodeURIComponent(prefix)}&limit=100`);
      expect(whole.body.pages.map((p) => p.page)).toEqual(sorted);
      expect(whole.body.cursor).toBeNull();
      const none = await gateway.api.read("prefix=no-such-prefix-");
      expect(none.body).toEqual({ pages: [], cursor: null });
    });

    test("prefix - raw=true lists each page's per-DC entries", async () => {
      await gateway.api.batch([{ page: "rawlist-1", counter: "likes", change: 2, id: "rl" }]);
      const res = await gateway.api.read<{ pages: PageRaw[]; cursor: string | null }>(
        "prefix=rawlist-&raw=true",
      );
      expect(res.body.pages).toEqual([
        expect.objectContaining({
          page: "rawlist-1",
          viewers: {},
          counters: { likes: { dc1: { p: 2, n: 0 } } },
        }),
      ]);
    });
  });
});
