/**
 * The SDK in real headless Chromium: bundled for the browser (a Node-only import would fail the
 * build), loaded by a page on another origin, subscribing with the browser's own WebSocket.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, expect, it } from "vitest";
import type * as Sdk from "../src/index.js";
import { eventually } from "../../../test/support/eventually.js";
import { LinkProxy } from "../../../test/support/link_proxy.js";
import { TestPlatform } from "../../../test/support/platform.js";
import { testClient, uniquePage } from "./support.js";
import { describeWithChromium, launchChromium } from "../../../test/support/chromium.js";

declare global {
  interface Window {
    __updates: Array<{ page: string; viewers: number; counters: Record<string, number> }>;
    __errors: string[];
    __key: string;
    /** EventSource instances the page made. */
    __sources: number;
    /** The bundled SDK, as the host page's module script exposes it. */
    livecount: typeof Sdk;
  }
}

describeWithChromium("sdk - in Chromium", () => {
  let platform: TestPlatform;
  let host: Server;
  let browser: Browser;
  let sdk: string;

  beforeAll(async () => {
    const result = await build({
      entryPoints: [fileURLToPath(new URL("../src/index.ts", import.meta.url))],
      bundle: true,
      platform: "browser",
      format: "esm",
      target: "es2022",
      write: false,
      logLevel: "silent",
    });
    sdk = result.outputFiles[0]!.text;
    platform = await TestPlatform.start();
    host = createServer((req, res) => {
      if (req.url === "/sdk.js") {
        res.writeHead(200, { "content-type": "text/javascript" }).end(sdk);
        return;
      }
      res
        .writeHead(200, { "content-type": "text/html" })
        .end(
          '<!doctype html><title>sdk</title><script type="module">import * as m from "/sdk.js"; window.livecount = m;</script>',
        );
    });
    await new Promise<void>((resolve) => host.listen(0, "127.0.0.1", resolve));
    browser = await launchChromium();
  });

  afterAll(async () => {
    await browser?.close();
    await new Promise((resolve) => (host ? host.close(resolve) : resolve(undefined)));
    await platform?.close();
  });

  it("subscribes with the browser's WebSocket and counts the tab as a viewer", async () => {
    const page = uniquePage("browser");
    const tab = await browser.newPage();
    await tab.goto(`http://127.0.0.1:${(host.address() as AddressInfo).port}/`);
    await tab.waitForFunction(() => window.livecount !== undefined);
    await tab.evaluate(
      ([baseUrl, id]) => {
        const { LivecountClient, newIdempotencyKey } = window.livecount;
        window.__updates = [];
        window.__errors = [];
        window.__key = newIdempotencyKey();
        const client = new LivecountClient({
          baseUrl: baseUrl!,
          onError: (e) => window.__errors.push(e.code),
        });
        client.subscribe(id!, (u) => window.__updates.push(u), { mode: "join" });
      },
      [platform.url, page],
    );
    await platform.waitForViewers(page, 1);

    const { client } = testClient(platform.url);
    await client.increment(page, "likes", 3);
    await tab.waitForFunction(
      (id) => window.__updates.some((u) => u.page === id && u.counters.likes === 3),
      page,
    );
    expect(await tab.evaluate(() => window.__key)).toMatch(/^[0-9a-f-]{36}$/);
    expect(await tab.evaluate(() => window.__errors)).toEqual([]);

    await tab.close();
    await platform.waitForViewers(page, 0);
    await client.close();
  });

  it("subscribes over event streams with the browser's EventSource, and reopens a stream that was cut", async () => {
    const page = uniquePage("browser-sse");
    const front = await LinkProxy.start({ targetPort: platform.app.port });
    const tab = await browser.newPage();
    try {
      await tab.goto(`http://127.0.0.1:${(host.address() as AddressInfo).port}/`);
      await tab.waitForFunction(() => window.livecount !== undefined);
      await tab.evaluate(
        ([baseUrl, id]) => {
          window.__updates = [];
          window.__errors = [];
          window.__sources = 0;
          // The browser's own EventSource, counted.
          const Native = window.EventSource;
          window.EventSource = class extends Native {
            constructor(url: string | URL, init?: EventSourceInit) {
              super(url, init);
              window.__sources++;
            }
          };
          const { LivecountClient } = window.livecount;
          const client = new LivecountClient({
            baseUrl: baseUrl!,
            transport: "sse",
            reconnect: { baseMs: 20, maxMs: 200 },
            onError: (e) => window.__errors.push(e.code),
          });
          client.subscribe(id!, (u) => window.__updates.push(u));
        },
        [`http://127.0.0.1:${front.port}`, page],
      );
      await tab.waitForFunction((id) => window.__updates.some((u) => u.page === id), page);
      const { client } = testClient(platform.url);
      await client.increment(page, "likes", 2);
      await tab.waitForFunction(
        (id) => window.__updates.some((u) => u.page === id && u.counters.likes === 2),
        page,
      );
      // A stream watches: the page has no viewer.
      expect((await platform.counter(page)).viewers).toBe(0);

      front.cut();
      front.heal();
      await client.increment(page, "likes", 1);
      await tab.waitForFunction(
        (id) => window.__updates.some((u) => u.page === id && u.counters.likes === 3),
        page,
      );
      expect(await tab.evaluate(() => window.__sources)).toBeGreaterThanOrEqual(2);
      expect(await tab.evaluate(() => window.__errors)).toEqual([]);
      await client.close();
    } finally {
      await tab.close();
      await front.close();
    }
    await eventually(() => expect(platform.app.gateway.eventStreams.open).toBe(0));
  });
});
