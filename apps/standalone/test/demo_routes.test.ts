/**
 * The demo page's server-side routes in the all-in-one process: they change the demo page's own
 * counters through the SDK, exactly once per id, and nothing else; the publisher key never leaves
 * the server. They take same-origin JSON requests only, within their own small budget.
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { DEMO_PAGE } from "../src/index.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";

describe("standalone - demo routes", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({ LIVECOUNT_DEMO: "1" });
  });

  afterAll(async () => {
    await platform?.close();
  });

  /** A request as the demo page's own script sends it: same-origin, JSON. */
  function post(path: string, body?: unknown, method = "POST"): Promise<Response> {
    return fetch(`${platform.url}${path}`, {
      method,
      headers: { "content-type": "application/json", "sec-fetch-site": "same-origin" },
      ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    });
  }

  async function counters(): Promise<Readonly<Record<string, number>>> {
    return (await platform.counter(DEMO_PAGE)).counters;
  }

  test("demo - likes, reactions and unread change through the route, with no key from the browser", async () => {
    const before = await counters();
    for (const counter of [
      "likes",
      "reaction:thumbs",
      "reaction:heart",
      "reaction:party",
      "unread",
      "unread",
    ]) {
      const res = await post("/demo/counter", { page: DEMO_PAGE, counter, action: "increment" });
      expect(res.status).toBe(200);
      const text = await res.text();
      expect(text).not.toContain(TEST_PUBLISHER_KEY);
      expect(JSON.parse(text)).toMatchObject({ page: DEMO_PAGE, counter });
    }
    const after = await counters();
    const delta = (name: string): number => (after[name] ?? 0) - (before[name] ?? 0);
    expect(["likes", "reaction:thumbs", "reaction:heart", "reaction:party", "unread"].map(delta)).toEqual([
      1, 1, 1, 1, 2,
    ]);

    // The old like route still adds one like.
    expect((await post("/demo/like", { page: DEMO_PAGE })).status).toBe(200);
    expect((await counters()).likes).toBe(after.likes! + 1);
  });

  test("demo - mark read resets the unread badge to zero", async () => {
    await post("/demo/counter", { counter: "unread", action: "increment" });
    await post("/demo/counter", { counter: "unread", action: "increment" });
    const res = await post("/demo/counter", { page: DEMO_PAGE, counter: "unread", action: "reset" });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ counter: "unread", value: 0 });
    expect((await counters()).unread ?? 0).toBe(0);
  });

  test("demo - a click's id makes its retries count once", async () => {
    const before = (await counters())["reaction:party"] ?? 0;
    for (let i = 0; i < 3; i++)
      expect(
        (await post("/demo/counter", { counter: "reaction:party", action: "increment", id: "click-1" }))
          .status,
      ).toBe(200);
    expect((await counters())["reaction:party"]).toBe(before + 1);
  });

  test("demo - only the demo page's fixed counters and actions are allowed", async () => {
    const before = await counters();
    const cases: Array<[unknown, number, string]> = [
      [{ page: "someone-elses-page", counter: "likes", action: "increment" }, 403, "forbidden"],
      [{ counter: "views", action: "increment" }, 403, "forbidden"],
      [{ counter: "__proto__", action: "increment" }, 403, "forbidden"],
      [{ counter: "likes", action: "reset" }, 403, "forbidden"],
      [{ counter: "reaction:heart", action: "decrement" }, 400, "invalid_body"],
      [{ counter: "likes", action: "increment", id: "has space" }, 400, "invalid_idempotency_key"],
      [[{ counter: "likes", action: "increment" }], 400, "invalid_body"],
      ["{not json", 400, "invalid_body"],
    ];
    for (const [body, status, code] of cases) {
      const res = await post("/demo/counter", body);
      expect(res.status, JSON.stringify(body)).toBe(status);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe(code);
    }
    const get = await post("/demo/counter", undefined, "GET");
    expect(get.status).toBe(405);
    expect(await counters()).toEqual(before);
  });

  test.each(["0", "off"])("demo - the routes are off with LIVECOUNT_DEMO=%s", async (value) => {
    const off = await TestPlatform.start({ LIVECOUNT_DEMO: value });
    try {
      for (const path of ["/demo/counter", "/demo/like"]) {
        const res = await fetch(`${off.url}${path}`, {
          method: "POST",
          body: JSON.stringify({ counter: "likes", action: "increment" }),
        });
        expect(res.status).toBe(404);
      }
    } finally {
      await off.close();
    }
  });
});

describe("standalone - demo routes refuse other sites and keep to their own budget", () => {
  const BURST = 3;
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_DEMO: "1",
      LIVECOUNT_DEMO_RATE: "1",
      LIVECOUNT_DEMO_BURST: String(BURST),
      LIVECOUNT_PUBLISHER_BURST: String(BURST + 2),
      LIVECOUNT_PUBLISHER_RATE: "1",
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  function like(
    headers: Record<string, string>,
    body = '{"counter":"likes","action":"increment"}',
  ): Promise<Response> {
    return fetch(`${platform.url}/demo/counter`, { method: "POST", headers, body });
  }

  test("demo - cross-site, origin-less and text/plain requests are 403 and count nothing", async () => {
    const host = new URL(platform.url).host;
    const refused: Array<Record<string, string>> = [
      { "content-type": "application/json", "sec-fetch-site": "cross-site" },
      { "content-type": "application/json", "sec-fetch-site": "same-site" },
      { "content-type": "application/json", origin: "https://evil.example" },
      { "content-type": "application/json" },
      // What a cross-site form or a no-cors fetch can send without a preflight.
      { "content-type": "text/plain", "sec-fetch-site": "same-origin" },
      { "content-type": "text/plain", origin: `http://${host}` },
    ];
    for (const headers of refused) {
      const res = await like(headers);
      expect(res.status, JSON.stringify(headers)).toBe(403);
      expect(await res.json()).toMatchObject({ error: { code: "forbidden" } });
      // Refused by its headers before its body is read: what the body holds does not matter.
      const garbage = await like(headers, "{not json");
      expect(garbage.status, JSON.stringify(headers)).toBe(403);
      expect(await garbage.json()).toMatchObject({ error: { code: "forbidden" } });
    }
    expect((await platform.counter(DEMO_PAGE)).counters.likes).toBeUndefined();
    // A same-origin request with a bad body is answered for its body.
    const sameOrigin = { "content-type": "application/json", "sec-fetch-site": "same-origin" };
    const bad = await like(sameOrigin, "{not json");
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { code: "invalid_body" } });
    // An older browser without Sec-Fetch-Site still names its own origin.
    expect((await like({ "content-type": "application/json", origin: `http://${host}` })).status).toBe(200);
  });

  test("demo - past its own burst the demo is 429, and the publisher key keeps the rest of its budget", async () => {
    const sameOrigin = { "content-type": "application/json; charset=utf-8", "sec-fetch-site": "same-origin" };
    // The previous test spent one of the burst; the rest goes now, then the demo is refused. All at
    // once: one after the other, a loaded machine could take the second a token takes to come back.
    const answers = await Promise.all(Array.from({ length: BURST - 1 + 10 }, () => like(sameOrigin)));
    const statuses = answers.map((res) => res.status).sort();
    expect(statuses).toEqual([...Array<number>(BURST - 1).fill(200), ...Array<number>(10).fill(429)]);
    for (const res of answers.filter((a) => a.status === 429))
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect((await platform.counter(DEMO_PAGE)).counters.likes).toBe(BURST);
    // The demo took one publisher token per change it made, none for those it refused.
    const put = await fetch(`${platform.url}/v1/pages/${DEMO_PAGE}/counter`, {
      method: "PUT",
      headers: { authorization: `Bearer ${TEST_PUBLISHER_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ action: "increment", counter: "likes" }),
    });
    expect(put.status).toBe(200);
  });
});
