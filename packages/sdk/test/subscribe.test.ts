/**
 * Live values over the WebSocket against a real embedded gateway: updates arrive, one socket serves
 * every subscription, a dropped socket comes back and subscribes again, joins count as viewers.
 */
import WebSocket from "ws";
import { describe, expect, test } from "vitest";
import { LivecountClient, type LivecountError } from "../src/index.js";
import { eventually, sleep } from "../../../test/support/eventually.js";
import { TEST_ENV, TestPlatform } from "../../../test/support/platform.js";
import type { FaultProxy } from "./fault_proxy.js";
import { recorder, uniquePage, useGateway } from "./support.js";

const GRACE_MS = Number(TEST_ENV.LIVECOUNT_GRACE_MS);

describe("sdk - subscribe", () => {
  const fx = useGateway({ reconnect: { baseMs: 20, maxMs: 200 } });
  const proxy = (): Promise<FaultProxy> => fx.proxy();
  const client = fx.client;

  test("sdk - a subscriber gets the current value, then every change", async () => {
    const { client: c } = client(fx.platform.url);
    const page = uniquePage("live");
    await c.increment(page, "likes", 2);
    const r = recorder();
    c.subscribe(page, r.listener);
    await eventually(() =>
      expect(r.last()).toMatchObject({ page, viewers: 0, counters: { likes: 2 }, dcs: ["dc1"], lagMs: 0 }),
    );
    expect(r.last()!.ts).toBeGreaterThan(0);
    await c.increment(page, "likes");
    await eventually(() => expect(r.last()?.counters.likes).toBe(3));
    c.queue(page, "reaction:heart", 1);
    await c.flush();
    await eventually(() => expect(r.last()?.counters).toEqual({ likes: 3, "reaction:heart": 1 }));
  });

  test("sdk - one socket serves every subscription of a client, and unsubscribe stops updates", async () => {
    const p = await proxy();
    const { client: c } = client(p.url);
    const pages = [uniquePage("shared-a"), uniquePage("shared-b"), uniquePage("shared-c")];
    const recs = pages.map(() => recorder());
    const offs = pages.map((page, i) => c.subscribe(page, recs[i]!.listener));
    const second = recorder();
    c.subscribe(pages[0]!, second.listener);
    await eventually(() => expect(recs.every((r) => r.last() !== undefined)).toBe(true));
    await eventually(() => expect(second.last()).toBeDefined());
    expect(p.count("GET /ws")).toBe(1);
    expect(c.connects).toBe(1);

    offs[0]!();
    const seen = recs[0]!.updates.length;
    await c.increment(pages[0]!, "likes");
    await eventually(() => expect(second.last()?.counters.likes).toBe(1));
    expect(recs[0]!.updates.length).toBe(seen);
  });

  test("sdk - a dropped socket reconnects and subscribes again", async () => {
    const p = await proxy();
    const { client: c } = client(p.url);
    const writer = client(fx.platform.url).client;
    const page = uniquePage("reconnect");
    const r = recorder();
    c.subscribe(page, r.listener);
    await eventually(() => expect(r.last()).toBeDefined());

    for (let drop = 1; drop <= 3; drop++) {
      p.resetAll();
      await writer.increment(page, "likes");
      await eventually(() => expect(r.last()?.counters.likes).toBe(drop));
    }
    expect(c.connects).toBeGreaterThanOrEqual(4);
    expect(p.count("GET /ws")).toBe(c.connects);
  });

  test("sdk - join counts the client as a viewer, also after a reconnect, until it unsubscribes", async () => {
    const p = await proxy();
    const { client: c } = client(p.url);
    const page = uniquePage("join");
    const r = recorder();
    const off = c.subscribe(page, r.listener, { mode: "join", viewer: "sdk-viewer-1" });
    await fx.platform.waitForViewers(page, 1);
    await eventually(() => expect(r.last()?.viewers).toBe(1));

    // Dropped, the old socket stops counting after the grace window (300 ms here); the new one
    // must have joined again for the viewer to still count after it.
    p.resetAll();
    await eventually(() => expect(c.connects).toBe(2));
    await sleep(2 * GRACE_MS);
    await fx.platform.waitForViewers(page, 1);

    // The same viewer id on another client counts once.
    const other = client(fx.platform.url).client;
    const offOther = other.subscribe(page, () => {}, { mode: "join", viewer: "sdk-viewer-1" });
    const third = client(fx.platform.url).client;
    const offThird = third.subscribe(page, () => {}, { mode: "join", viewer: "sdk-viewer-2" });
    await fx.platform.waitForViewers(page, 2);
    offThird();
    offOther();
    await fx.platform.waitForViewers(page, 1);
    off();
    await fx.platform.waitForViewers(page, 0);
  });

  test("sdk - errors the server sends for a page reach the subscription's onError", async () => {
    const { client: c } = client(fx.platform.url);
    const errors: LivecountError[] = [];
    // A page id over 128 characters is refused by the SDK itself.
    expect(() => c.subscribe("p".repeat(129), () => {})).toThrow(/page id/);
    // Too many pages on one socket is the server's call (64 by default).
    const offs = Array.from({ length: 65 }, (_, i) =>
      c.subscribe(`${uniquePage("many")}-${i}`, () => {}, { onError: (e) => errors.push(e) }),
    );
    await eventually(() => expect(errors.map((e) => e.code)).toContain("too_many_pages"));
    expect(errors[0]).toMatchObject({ retryable: false });
    expect(errors[0]!.page).toMatch(/^sdk-many-/);
    for (const off of offs) off();
  });

  test("sdk - pages refused as rate_limited (too many new pages from this address) are asked for again until each counts", async () => {
    const strict = await TestPlatform.start({ LIVECOUNT_NEW_PAGE_RATE: "1", LIVECOUNT_NEW_PAGE_BURST: "2" });
    try {
      const { client: c } = client(strict.url);
      const pages = Array.from({ length: 5 }, (_, i) => uniquePage(`refused-${i}`));
      const errors: LivecountError[] = [];
      for (const page of pages)
        c.subscribe(page, () => {}, { mode: "join", viewer: "sdk-v", onError: (e) => errors.push(e) });
      await eventually(() => expect(errors.map((e) => e.code)).toContain("rate_limited"));
      for (const page of pages) await strict.waitForViewers(page, 1, 15_000);
    } finally {
      await strict.close();
    }
  });

  test("sdk - subscribe needs a WebSocket implementation on Node 20", () => {
    const c = new LivecountClient({ baseUrl: fx.platform.url, WebSocket: undefined });
    fx.own(c);
    if ((globalThis as { WebSocket?: unknown }).WebSocket === undefined)
      expect(() => c.subscribe("p", () => {})).toThrow(/WebSocket/);
    const withWs = new LivecountClient({ baseUrl: fx.platform.url, WebSocket });
    fx.own(withWs);
    expect(typeof withWs.subscribe("p", () => {})).toBe("function");
  });
});
