/**
 * LIVECOUNT_PAGE_FRAME_RATE at its limit, over real sockets: a page watched by more sockets than
 * the rate covers in one coalescing window gets its frames spaced by watchers / rate, ends on its
 * last value, and the gateway counts the waits.
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { eventually, sleep } from "../../../test/support/eventually.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { PublisherHttp } from "../../../test/support/publisher_http.js";
import type { TestClient } from "../../../test/support/ws_client.js";

/** 20 frames a second for a page: its 10 watchers here space its frames by 500 ms. */
const RATE = 20;
const WATCHERS = 10;
const SPACING_MS = (WATCHERS * 1000) / RATE;

describe("gateway - frame rate per page", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({ LIVECOUNT_PAGE_FRAME_RATE: String(RATE) });
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("gateway - a page's frames to its many watchers are spaced by watchers / LIVECOUNT_PAGE_FRAME_RATE, the last value included", async () => {
    const page = "frame-rate-hot";
    const watchers: TestClient[] = [];
    for (let i = 0; i < WATCHERS; i++) watchers.push(await platform.watcher(page));
    const publisher = new PublisherHttp(platform.url, TEST_PUBLISHER_KEY);
    const from = watchers[0]!.counts(page).length;
    // A like every 25 ms for 1.6 s: a change in nearly every 50 ms window.
    let likes = 0;
    const started = Date.now();
    while (Date.now() - started < 1_600) {
      expect((await publisher.change(page, "likes", 1)).status).toBe(200);
      likes++;
      await sleep(25);
    }
    for (const w of watchers)
      await eventually(() => expect(w.lastCount(page)?.counters.likes).toBe(likes), { timeoutMs: 10_000 });
    const ts = watchers[0]!
      .counts(page)
      .slice(from)
      .map((f) => f.ts);
    const gaps = ts.slice(1).map((t, i) => t - ts[i]!);
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(SPACING_MS);
    // 1.6 s of changes in frames 500 ms apart: four or five frames, not thirty; two at least, a gap
    // to measure (a stall of a loaded machine merges some: two on a CI host at nice 19).
    expect(ts.length).toBeGreaterThanOrEqual(2);
    expect(ts.length).toBeLessThanOrEqual(6);
    expect(await platform.metricsText()).toMatch(/^livecount_gateway_page_frames_spaced_total [1-9]\d*$/m);
  });

  test("gateway - a page with one watcher keeps the coalescing window under the same rate", async () => {
    const page = "frame-rate-quiet";
    const watcher = await platform.watcher(page);
    const publisher = new PublisherHttp(platform.url, TEST_PUBLISHER_KEY);
    const from = watcher.counts(page).length;
    for (let i = 1; i <= 10; i++) {
      expect((await publisher.change(page, "likes", 1)).status).toBe(200);
      await sleep(80);
    }
    await eventually(() => expect(watcher.lastCount(page)?.counters.likes).toBe(10));
    // One watcher at 20 frames a second is 50 ms: likes 80 ms apart are frames of their own (a
    // stall of the machine may merge a few; spaced by 500 ms they would be two or three).
    expect(watcher.counts(page).slice(from).length).toBeGreaterThanOrEqual(6);
  });
});
