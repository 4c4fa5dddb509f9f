/**
 * Who may use the publisher API, and how, against a real gateway (uWS on a free port, counter node,
 * in-memory bus and store): changes without a valid key refused, wrong methods answered 405 with
 * Allow, and each key's rate limit. Plain HTTP, no SDK.
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { PublisherHttp, counterPath } from "../../../test/support/publisher_http.js";
import { codeOf, publisherGateway } from "./publisher_gateway.js";

describe("gateway - publisher API", () => {
  const gateway = publisherGateway();

  describe("auth and methods", () => {
    test("auth - every change without a valid publisher key is 401 unauthorized and changes nothing", async () => {
      const page = "auth-all";
      await gateway.api.change(page, "likes", 3);
      const keys: Array<string | null> = [null, "", "wrong-key-123456", `${TEST_PUBLISHER_KEY}x`];
      const calls = (key: string | null) => [
        gateway.api.batch([{ page, counter: "likes", change: 1, id: `a-${key}` }], { key }),
        gateway.api.reset(page, "likes", { key }),
        gateway.api.remove(page, "likes", { key }),
        gateway.api.request("PUT", `/v1/pages/${page}/counter`, {
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
      const basic = await gateway.api.request("DELETE", counterPath(page, "likes"), {
        key: null,
        headers: { authorization: `Basic ${Buffer.from(`u:${TEST_PUBLISHER_KEY}`).toString("base64")}` },
      });
      expect(basic.status).toBe(401);
      expect(await gateway.api.counters(page)).toEqual({ likes: 3 });
      // Reads need no key.
      expect((await gateway.api.read(`page=${page}`)).status).toBe(200);
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
        const res = await gateway.api.request(method, path);
        expect(res.status, `${method} ${path}`).toBe(405);
        expect(codeOf(res.body)).toBe("method_not_allowed");
        expect(res.headers.get("allow"), `${method} ${path}`).toBe(allow);
      }
      const missing = await gateway.api.request("GET", "/v1/pages/p/counters");
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
    // Five at once: one after the other, a loaded machine could take the second a token takes to
    // come back, and the fourth would rightly pass.
    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) => api.change(page, "likes", 1, `rl-${i}`)),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 200, 429, 429]);
    const limited = answers.find((a) => a.status === 429)!;
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
