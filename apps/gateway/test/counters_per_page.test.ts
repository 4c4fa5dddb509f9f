/**
 * LIVECOUNT_MAX_COUNTERS_PER_PAGE at its limit, through the public API: a page holding that many
 * counters refuses a change to a new one (PUT and batch items alike), its own keep counting, and
 * another page has room of its own.
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { PublisherHttp } from "../../../test/support/publisher_http.js";

const MAX = 3;

describe("gateway - counters per page", () => {
  let platform: TestPlatform;
  let api: PublisherHttp;

  beforeAll(async () => {
    platform = await TestPlatform.start({ LIVECOUNT_MAX_COUNTERS_PER_PAGE: String(MAX) });
    api = new PublisherHttp(platform.url, TEST_PUBLISHER_KEY);
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("gateway - past LIVECOUNT_MAX_COUNTERS_PER_PAGE a new counter is refused with invalid_counter and changes nothing", async () => {
    const page = "counters-cap";
    for (const counter of ["a", "b", "c"]) expect((await api.change(page, counter, 1)).status).toBe(200);
    const refused = await api.change(page, "d", 1);
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ error: { code: "invalid_counter" } });
    const batch = await api.batch([
      { page, counter: "a", change: 1, id: "cap-a" },
      { page, counter: "e", change: 1, id: "cap-e" },
    ]);
    expect(batch.status).toBe(200);
    expect(batch.body.results.map((r) => ("error" in r ? r.error.code : "ok"))).toEqual([
      "ok",
      "invalid_counter",
    ]);
    expect((await platform.counter(page)).counters).toEqual({ a: 2, b: 1, c: 1 });
    expect((await api.change("counters-cap-other", "d", 1)).status).toBe(200);
  });
});
