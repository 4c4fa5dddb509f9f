/**
 * Attention in real headless Chromium: the widget reports whether its tab is visible, and
 * `show="active"` / `show="connections"` elements display what the gateway counts.
 *
 * Headless Chromium keeps every tab visible, so each tab's visibility is emulated the way the Page
 * Visibility API presents it to a page: `document.visibilityState` (and `document.hidden`) answer
 * what the test sets, and a `visibilitychange` event fires when it changes.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { startStandalone } from "@livecount/standalone";
import type { LiveCountDetail, LiveCountEvent } from "@livecount/widget";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, expect, it } from "vitest";
import { describeWithChromium, launchChromium } from "../support/chromium.js";
import { eventually } from "../support/eventually.js";

const GRACE_MS = 300;
const SETTLE_MS = 10_000;

declare global {
  interface Window {
    /** Sets the emulated visibility of this tab and fires `visibilitychange`. */
    __setVisibility(state: "visible" | "hidden"): void;
    __details: LiveCountDetail[];
  }
}

describeWithChromium("widget attention in Chromium", () => {
  let gateway: Awaited<ReturnType<typeof startStandalone>>;
  let host: Server;
  let hostOrigin: string;
  let browser: Browser;
  const pageErrors: string[] = [];

  beforeAll(async () => {
    gateway = await startStandalone({ env: { LIVECOUNT_PORT: "0", LIVECOUNT_GRACE_MS: String(GRACE_MS) } });
    host = await startHost(`http://localhost:${gateway.port}`);
    hostOrigin = `http://127.0.0.1:${(host.address() as AddressInfo).port}`;
    browser = await launchChromium();
  });

  afterAll(async () => {
    await browser?.close();
    await new Promise((resolve) => (host ? host.close(resolve) : resolve(undefined)));
    await gateway?.close();
  });

  /** Opens the host page for `page` in a new tab of `context`, visible or in the background. */
  async function open(
    context: BrowserContext,
    page: string,
    visibility: "visible" | "hidden",
  ): Promise<Page> {
    const tab = await context.newPage();
    tab.on("pageerror", (err) => pageErrors.push(`${page}: ${err.message}`));
    await tab.addInitScript((initial) => {
      let state = initial;
      Object.defineProperty(document, "visibilityState", { get: () => state, configurable: true });
      Object.defineProperty(document, "hidden", { get: () => state !== "visible", configurable: true });
      window.__setVisibility = (next) => {
        state = next;
        document.dispatchEvent(new Event("visibilitychange"));
      };
      window.__details = [];
      window.addEventListener("livecount", (e) => window.__details.push((e as LiveCountEvent).detail));
    }, visibility);
    await tab.goto(`${hostOrigin}/?page=${encodeURIComponent(page)}`);
    return tab;
  }

  /** What the tab's three elements show: viewers, active viewers, connections. */
  async function shown(tab: Page): Promise<string[]> {
    return tab.evaluate(() =>
      ["#viewers", "#active", "#connections"].map((s) => document.querySelector(s)!.textContent ?? ""),
    );
  }

  async function waitForShown(tab: Page, want: [number, number, number]): Promise<void> {
    await eventually(async () => expect(await shown(tab)).toEqual(want.map(String)), {
      timeoutMs: SETTLE_MS,
    });
  }

  async function overHttp(page: string): Promise<{ viewers: number; active: number; connections: number }> {
    const res = await fetch(`http://localhost:${gateway.port}/v1/pages/${encodeURIComponent(page)}/counter`);
    expect(res.status).toBe(200);
    return (await res.json()) as { viewers: number; active: number; connections: number };
  }

  it("shows viewers, active viewers and connections through hide, show and close", async () => {
    const page = "attention-article";
    const alice = await browser.newContext();
    const bob = await browser.newContext();
    try {
      const front = await open(alice, page, "visible");
      await waitForShown(front, [1, 1, 1]);
      // A second tab of the same browser, opened in the background: one viewer, two connections.
      const back = await open(alice, page, "hidden");
      await waitForShown(front, [1, 1, 2]);
      // Alice switches away from the page altogether.
      await front.evaluate(() => window.__setVisibility("hidden"));
      await waitForShown(back, [1, 0, 2]);
      // Bob arrives looking at it.
      const bobTab = await open(bob, page, "visible");
      await waitForShown(bobTab, [2, 1, 3]);
      // Alice brings her background tab to the front.
      await back.evaluate(() => window.__setVisibility("visible"));
      await waitForShown(bobTab, [2, 2, 3]);
      expect(await overHttp(page)).toMatchObject({ viewers: 2, active: 2, connections: 3 });
      // She closes the hidden one: still two viewers, both looking, on two connections.
      await front.close();
      await waitForShown(bobTab, [2, 2, 2]);
      // Events carry the same numbers.
      const last = await bobTab.evaluate(() => window.__details.at(-1));
      expect(last).toMatchObject({ page, viewers: 2, active: 2, connections: 2 });
      // Bob hides his tab and Alice closes hers: Bob is the only viewer, not looking.
      await bobTab.evaluate(() => window.__setVisibility("hidden"));
      await back.close();
      await waitForShown(bobTab, [1, 0, 1]);
    } finally {
      await Promise.all([alice.close(), bob.close()]);
    }
    expect(pageErrors).toEqual([]);
  });
});

function startHost(gatewayOrigin: string): Promise<Server> {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://host");
    if (url.pathname !== "/") {
      res.writeHead(404).end();
      return;
    }
    const page = (url.searchParams.get("page") ?? "").replace(/[^A-Za-z0-9-]/g, "");
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>attention ${page}</title>
<script src="${gatewayOrigin}/livecount.js"></script></head>
<body>
<p><live-count id="viewers" page="${page}"></live-count> viewers,
<live-count id="active" page="${page}" show="active"></live-count> looking,
<live-count id="connections" page="${page}" show="connections"></live-count> tabs</p>
</body>
</html>`);
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}
