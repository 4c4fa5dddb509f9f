/**
 * The <live-count> widget in real headless Chromium against a real standalone gateway.
 *
 * The host pages come from a different origin (127.0.0.1:<host port>) than the gateway
 * (localhost:<gateway port>), as on a customer's site: the widget must find its server from its
 * own script URL. Every browser context is a separate browser profile, so a separate viewer.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { signJoinToken } from "@livecount/sdk";
import { startStandalone } from "@livecount/standalone";
import type { LiveCountDetail, LiveCountEvent } from "@livecount/widget";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { describeWithChromium, launchChromium } from "../support/chromium.js";

const PUBLISHER_KEY = "test-key";
/** Private pages of this suite's gateway, and the secret their join tokens are signed with. */
const PRIVATE_PREFIX = "private-";
const JOIN_SECRET = "widget-test-join-secret-0123456789";
/** Short grace window so a closed browser stops counting quickly; the default is 3 s. */
/**
 * Longer than the widget's first reconnect delay (full jitter under BACKOFF_BASE_MS, 500 ms) with
 * room for the handshake on a loaded machine: the reconnect test checks that a viewer who comes back
 * within the grace window never dips. At 500 ms it dipped whenever the delay drew near 500.
 */
const GRACE_MS = 2_000;
/** How long a visible change may take: grace + coalescing + a loaded machine. Polled, not slept. */
const SETTLE_MS = 10_000;

declare global {
  interface Window {
    /** Every WebSocket constructed on the page, recorded by an init script. */
    __sockets: WebSocket[];
    /** Every `livecount` event detail seen on the page, in order. */
    __details: LiveCountDetail[];
    /** Every text frame any socket received, with when (performance.now()). */
    __received: Array<{ at: number; data: string }>;
    /** When each entry of `__details` was shown (performance.now()). */
    __shownAt: number[];
  }
}

describeWithChromium("widget in Chromium", () => {
  let gateway: Awaited<ReturnType<typeof startStandalone>>;
  let gatewayOrigin: string;
  let host: Server;
  let hostOrigin: string;
  let browser: Browser;
  const contexts: BrowserContext[] = [];
  const pageErrors: string[] = [];

  beforeAll(async () => {
    gateway = await startStandalone({
      env: {
        LIVECOUNT_PORT: "0",
        LIVECOUNT_PUBLISHER_KEYS: PUBLISHER_KEY,
        LIVECOUNT_GRACE_MS: String(GRACE_MS),
        LIVECOUNT_PRIVATE_PREFIXES: PRIVATE_PREFIX,
        LIVECOUNT_JOIN_SECRET: JOIN_SECRET,
      },
    });
    gatewayOrigin = `http://localhost:${gateway.port}`;
    host = await startHost(gatewayOrigin);
    hostOrigin = `http://127.0.0.1:${(host.address() as AddressInfo).port}`;
    browser = await launchChromium();
  });

  afterAll(async () => {
    await browser?.close();
    await new Promise((resolve) => (host ? host.close(resolve) : resolve(undefined)));
    await gateway?.close();
  });

  afterEach(async () => {
    await Promise.all(contexts.splice(0).map((c) => c.close()));
    // The widget must never throw into the host page, whatever the server answers.
    expect(pageErrors.splice(0)).toEqual([]);
  });

  /** A new browser profile: its own localStorage, so its own viewer id. */
  async function newBrowser(): Promise<BrowserContext> {
    const context = await browser.newContext({ locale: "en-US" });
    contexts.push(context);
    // The host page and the demo page run under a strict Content-Security-Policy: anything the
    // widget or the demo did inline would be refused, and is a failure here.
    context.on("console", (msg) => {
      if (msg.type() === "error" && /Content Security Policy/.test(msg.text())) pageErrors.push(msg.text());
    });
    await context.addInitScript(() => {
      const Native = window.WebSocket;
      window.__sockets = [];
      window.__details = [];
      window.__received = [];
      window.__shownAt = [];
      window.WebSocket = class extends Native {
        constructor(url: string | URL, protocols?: string | string[]) {
          super(url, protocols);
          window.__sockets.push(this);
          this.addEventListener("message", (e) => {
            if (typeof e.data === "string") window.__received.push({ at: performance.now(), data: e.data });
          });
        }
      };
      window.addEventListener("livecount", (e) => {
        window.__details.push((e as LiveCountEvent).detail);
        window.__shownAt.push(performance.now());
      });
    });
    return context;
  }

  /** Opens the host page for `page` in a new tab of `context`. */
  async function open(
    context: BrowserContext,
    page: string,
    params: Record<string, string> = {},
  ): Promise<Page> {
    const tab = await context.newPage();
    tab.on("pageerror", (err) => pageErrors.push(`${page}: ${err.message}`));
    await tab.goto(`${hostOrigin}/?${new URLSearchParams({ page, ...params })}`);
    return tab;
  }

  async function viewersOverHttp(page: string): Promise<number> {
    const res = await fetch(`${gatewayOrigin}/v1/pages/${encodeURIComponent(page)}/counter`, {
      headers: { authorization: `Bearer ${PUBLISHER_KEY}` },
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { viewers: number }).viewers;
  }

  it("counts one viewer per browser and drops a closed browser after the grace window", async () => {
    const first = await open(await newBrowser(), "article-1");
    await waitForText(first, "#viewers", "1");

    const secondBrowser = await newBrowser();
    const second = await open(secondBrowser, "article-1");
    await waitForText(second, "#viewers", "2");
    await waitForText(first, "#viewers", "2");

    await secondBrowser.close();
    await waitForText(first, "#viewers", "1");
  });

  it("shows a joining viewer's page with the viewer in it from the first value on, never the count before it", async () => {
    const page = "article-first-value";
    const first = await open(await newBrowser(), page);
    await waitForText(first, "#viewers", "1");
    // The gateway holds the page's count (1) when the second browser joins: that frame is the page
    // before this viewer, and the widget holds it back for FIRST_HOLD_MS, showing the owner's count
    // with the viewer (2) instead when it comes within that time.
    const second = await open(await newBrowser(), page);
    await waitForText(second, "#viewers", "2");
    await new Promise((resolve) => setTimeout(resolve, 500));
    const { received, shown } = await second.evaluate(
      (id) => ({
        received: window.__received.flatMap(({ at, data }) => {
          const f = JSON.parse(data) as {
            type: string;
            page?: string;
            viewers?: number;
            pages?: Record<string, { viewers: number }>;
          };
          const v = f.type === "count" && f.page === id ? f.viewers : f.pages?.[id]?.viewers;
          return v === undefined ? [] : [{ at, viewers: v }];
        }),
        shown: window.__details.flatMap((d, i) =>
          d.page === id ? [{ at: window.__shownAt[i]!, viewers: d.viewers }] : [],
        ),
      }),
      page,
    );
    // What the socket got: the count before this viewer, then the owner's count with it (again
    // when only `active` or `connections` moved).
    expect(distinct(received.map((r) => r.viewers))).toEqual([1, 2]);
    const gapMs = received.find((r) => r.viewers === 2)!.at - received[0]!.at;
    // Each element of the page gets the value: the same value may show more than once.
    const values = distinct(shown.map((s) => s.viewers));
    console.log("widget first value:", { gapMs: Math.round(gapMs), values });
    const holdMs = 250; // FIRST_HOLD_MS in packages/widget/src/livecount.ts
    // The count before the viewer is shown only once the hold is over, and replaced on the owner's
    // count's arrival; the page may skip it (a late timer, a count that came just in time)...
    if (values[0] === 1) {
      expect(values).toEqual([1, 2]);
      expect(shown[0]!.at - received[0]!.at).toBeGreaterThanOrEqual(holdMs - 5);
    } else expect(values).toEqual([2]);
    // ...and must, when the owner's count came well within the hold.
    if (gapMs < holdMs - 50) expect(values).toEqual([2]);
  });

  it("counts two tabs of the same browser as one viewer", async () => {
    const context = await newBrowser();
    const first = await open(context, "article-2");
    await waitForText(first, "#viewers", "1");
    const second = await open(context, "article-2");
    await waitForText(second, "#viewers", "1");
    // Another browser joins after the second tab, so once it is counted the second tab's join has
    // been applied too: two viewers, not three.
    const other = await open(await newBrowser(), "article-2");
    for (const tab of [first, second, other]) await waitForText(tab, "#viewers", "2");
    expect(await viewersOverHttp("article-2")).toBe(2);

    const ids = await Promise.all(
      [first, second].map((t) => t.evaluate(() => localStorage.getItem("livecount:viewer"))),
    );
    expect(ids[0]).toMatch(/^[\x21-\x7e]{1,128}$/);
    expect(ids[1]).toBe(ids[0]);
    for (const tab of [first, second, other]) {
      const seen = await tab.evaluate(() => window.__details.map((d) => d.viewers));
      expect(Math.max(...seen)).toBe(2);
    }
  });

  it("updates a likes element when the publisher increments likes over HTTP", async () => {
    const tab = await open(await newBrowser(), "article-1");
    await waitForText(tab, "#likes", "0");

    const res = await fetch(`${gatewayOrigin}/v1/pages/article-1/counter`, {
      method: "PUT",
      headers: {
        authorization: `Bearer ${PUBLISHER_KEY}`,
        "content-type": "application/json",
        "idempotency-key": "widget-test-like-1",
      },
      body: JSON.stringify({ action: "increment", counter: "likes", by: 1 }),
    });
    expect(res.status).toBe(200);

    await waitForText(tab, "#likes", "1");
    const last = await tab.evaluate(() => window.__details.at(-1));
    expect(last).toMatchObject({ page: "article-1", counters: { likes: 1 } });
    // Which data centers make up the value, and how stale the stalest is: one, fresh, here.
    expect(last).toMatchObject({ dcs: ["dc1"], lag_ms: 0 });
  });

  it("joins an element added after load over the page's single socket and leaves when it is removed", async () => {
    const tab = await open(await newBrowser(), "article-3");
    await waitForText(tab, "#viewers", "1");

    await tab.evaluate(() => {
      document.body.insertAdjacentHTML(
        "beforeend",
        '<live-count id="added" page="article-4"></live-count><live-count id="added-watch" page="article-3" mode="watch"></live-count>',
      );
    });
    await waitForText(tab, "#added", "1");
    await waitForText(tab, "#added-watch", "1");
    expect(await viewersOverHttp("article-4")).toBe(1);
    expect(await viewersOverHttp("article-3")).toBe(1);

    await tab.evaluate(() => document.getElementById("added")!.remove());
    await expect.poll(() => viewersOverHttp("article-4"), { timeout: SETTLE_MS, interval: 100 }).toBe(0);
    expect(await viewersOverHttp("article-3")).toBe(1);
    expect(await tab.evaluate(() => window.__sockets.length)).toBe(1);
  });

  it("negotiates counts frames on its one socket and shows every page's changes from them", async () => {
    const tab = await open(await newBrowser(), "article-c1");
    await waitForText(tab, "#likes", "0");
    const from = await tab.evaluate(() => {
      document.body.insertAdjacentHTML("beforeend", '<live-count id="c2" page="article-c2" counter="likes">');
      return window.__received.length;
    });
    await waitForText(tab, "#c2", "0");
    const like = (page: string): Promise<Response> =>
      fetch(`${gatewayOrigin}/v1/pages/${page}/counter`, {
        method: "PUT",
        headers: { authorization: `Bearer ${PUBLISHER_KEY}`, "idempotency-key": `widget-counts-${page}` },
        body: JSON.stringify({ action: "increment", counter: "likes", by: 1 }),
      });
    expect((await Promise.all([like("article-c1"), like("article-c2")])).map((r) => r.status)).toEqual([
      200, 200,
    ]);
    await waitForText(tab, "#likes", "1");
    await waitForText(tab, "#c2", "1");
    const sockets = await tab.evaluate(() => window.__sockets.map((w) => w.protocol));
    expect(sockets).toEqual(["livecount.counts"]);
    const types = await tab.evaluate(
      (n) => window.__received.slice(n).map((r) => (JSON.parse(r.data) as { type: string }).type),
      from,
    );
    expect(types.length).toBeGreaterThan(0);
    expect(types.every((t) => t === "counts")).toBe(true);
  });

  it("reconnects after the socket drops and joins again without a dip", async () => {
    const tab = await open(await newBrowser(), "article-7");
    await waitForText(tab, "#viewers", "1");

    const before = await tab.evaluate(() => {
      // Every state the element's data-error takes while the socket is away and back.
      const states: Array<string | null> = [];
      const el = document.getElementById("viewers")!;
      new MutationObserver(() => states.push(el.getAttribute("data-error"))).observe(el, {
        attributeFilter: ["data-error"],
      });
      (window as unknown as { __states: typeof states }).__states = states;
      window.__sockets[0]!.close();
      return window.__details.length;
    });
    // A new socket, whose rejoin is answered with a fresh count.
    await tab.waitForFunction((n) => window.__sockets.length === 2 && window.__details.length > n, before, {
      timeout: SETTLE_MS,
    });
    // The same viewer id is still counted once.
    expect(await tab.evaluate(() => document.getElementById("viewers")!.textContent)).toBe("1");
    // Marked offline while the socket was down (the value shown was the last known), and no more.
    expect(await tab.evaluate(() => (window as unknown as { __states: unknown[] }).__states)).toEqual([
      "offline",
      null,
    ]);
    expect(await tab.evaluate(() => document.getElementById("viewers")!.hasAttribute("data-error"))).toBe(
      false,
    );
    expect(await viewersOverHttp("article-7")).toBe(1);
    // Within the grace window a reconnect produces no dip.
    expect(await tab.evaluate((n) => window.__details.slice(n).map((d) => d.viewers), before)).not.toContain(
      0,
    );
  });

  it("shows the count to a watch-only element without counting it as a viewer", async () => {
    const watcher = await open(await newBrowser(), "article-5", { mode: "watch" });
    await waitForText(watcher, "#viewers", "0");

    const viewer = await open(await newBrowser(), "article-5");
    await waitForText(viewer, "#viewers", "1");
    await waitForText(watcher, "#viewers", "1");
    expect(await viewersOverHttp("article-5")).toBe(1);
  });

  it("marks elements with an invalid page id as invalid_page and keeps the others live", async () => {
    const context = await newBrowser();
    const tab = await open(context, "article-6");
    await waitForText(tab, "#viewers", "1");

    await tab.evaluate(() => {
      document.body.insertAdjacentHTML(
        "beforeend",
        '<live-count id="bad" page="not a page id"></live-count><live-count id="missing"></live-count>',
      );
    });
    for (const id of ["bad", "missing"]) {
      await tab.waitForFunction(
        (i) => document.getElementById(i)?.getAttribute("data-error") === "invalid_page",
        id,
        {
          timeout: SETTLE_MS,
        },
      );
      expect(await tab.evaluate((i) => document.getElementById(i)!.textContent, id)).toBe("");
    }

    // The socket still serves the valid page.
    const other = await open(await newBrowser(), "article-6");
    await waitForText(other, "#viewers", "2");
    await waitForText(tab, "#viewers", "2");
    expect(await tab.evaluate(() => window.__sockets.length)).toBe(1);
  });

  it("asks again for pages the gateway refused as too many new pages from this address, until every one shows its count", async () => {
    const strict = await startStandalone({
      env: {
        LIVECOUNT_PORT: "0",
        LIVECOUNT_PUBLISHER_KEYS: PUBLISHER_KEY,
        LIVECOUNT_NEW_PAGE_RATE: "1",
        LIVECOUNT_NEW_PAGE_BURST: "2",
      },
    });
    try {
      const tab = await (await newBrowser()).newPage();
      tab.on("pageerror", (err) => pageErrors.push(`strict: ${err.message}`));
      const pages = Array.from({ length: 5 }, (_, i) => `strict-${i}`);
      await tab.setContent(
        `<script src="http://localhost:${strict.port}/livecount.js"></script>` +
          pages.map((p) => `<live-count id="${p}" page="${p}"></live-count>`).join(""),
      );
      // Two go through at once, three are refused (rate_limited) and asked for again.
      await tab.waitForFunction(
        () =>
          [...document.querySelectorAll("live-count")].some(
            (e) => e.getAttribute("data-error") === "rate_limited",
          ),
        undefined,
        { timeout: SETTLE_MS },
      );
      for (const page of pages) await waitForText(tab, `#${page}`, "1");
      expect(await tab.evaluate(() => document.querySelectorAll("live-count[data-error]").length)).toBe(0);
      expect(await tab.evaluate(() => window.__sockets.length)).toBe(1);
    } finally {
      await strict.close();
    }
  });

  it("joins a private page with its token attribute, counted as the token's viewer; without one it shows unauthorized", async () => {
    const page = `${PRIVATE_PREFIX}1`;
    const token = await signJoinToken({ secret: JOIN_SECRET, viewer: "alice", page });
    const first = await open(await newBrowser(), page, { token });
    await waitForText(first, "#viewers", "1");
    // Another browser with alice's token is alice again: still one viewer.
    const second = await open(await newBrowser(), page, { token });
    await waitForText(second, "#viewers", "1");
    const bob = await open(await newBrowser(), page, {
      token: await signJoinToken({ secret: JOIN_SECRET, viewer: "bob", prefix: PRIVATE_PREFIX }),
    });
    await waitForText(bob, "#viewers", "2");
    expect(await viewersOverHttp(page)).toBe(2);

    const stranger = await open(await newBrowser(), page);
    await stranger.waitForFunction(
      () => document.getElementById("viewers")?.getAttribute("data-error") === "unauthorized",
      undefined,
      { timeout: SETTLE_MS },
    );
    expect(await stranger.evaluate(() => document.getElementById("viewers")!.textContent)).toBe("");
    expect(await viewersOverHttp(page)).toBe(2);
  });

  it("serves the demo page, which shows who is watching and counts a like", async () => {
    const tab = await (await newBrowser()).newPage();
    tab.on("pageerror", (err) => pageErrors.push(`demo: ${err.message}`));
    // Every request the page makes is answered; its icon is in the page (headless Chromium asks for
    // no /favicon.ico, a browser does without one).
    const failed: string[] = [];
    tab.on("response", (res) => void (res.status() >= 400 && failed.push(`${res.status()} ${res.url()}`)));
    await tab.goto(`${gatewayOrigin}/`);
    await waitForText(tab, "#viewers", "1");
    await waitForText(tab, "#likes", "0");

    await tab.click("#like");
    await waitForText(tab, "#likes", "1");
    expect(failed).toEqual([]);
    expect(await tab.evaluate(() => document.querySelector<HTMLLinkElement>("link[rel=icon]")?.href)).toMatch(
      /^data:image\/svg\+xml,/,
    );
  });

  it("demo page: reactions count, and the unread badge fills up and clears on mark read", async () => {
    const tab = await (await newBrowser()).newPage();
    tab.on("pageerror", (err) => pageErrors.push(`demo: ${err.message}`));
    await tab.goto(`${gatewayOrigin}/`);
    await waitForText(tab, "#reaction-heart", "0");
    expect(await tab.isHidden("#unread")).toBe(true);

    await tab.click('button[data-counter="reaction:heart"]');
    await tab.click('button[data-counter="reaction:heart"]');
    await tab.click('button[data-counter="reaction:party"]');
    await waitForText(tab, "#reaction-heart", "2");
    await waitForText(tab, "#reaction-party", "1");
    await waitForText(tab, "#reaction-thumbs", "0");

    await tab.click("#notify");
    await tab.click("#notify");
    await waitForText(tab, "#unread", "2");
    expect(await tab.isVisible("#unread")).toBe(true);
    await tab.click("#mark-read");
    await waitForText(tab, "#unread", "0");
    expect(await tab.isHidden("#unread")).toBe(true);

    // The page never holds the publisher key.
    expect(await tab.content()).not.toContain(PUBLISHER_KEY);
  });

  it("demo page: a refused tap says why in words, and a server without the demo route (a cluster's gateway) disables the buttons", async () => {
    const tab = await (await newBrowser()).newPage();
    tab.on("pageerror", (err) => pageErrors.push(`demo: ${err.message}`));
    const answer = (code: string, status: number) => ({
      status,
      contentType: "application/json",
      body: JSON.stringify({ error: { code, message: code } }),
    });
    await tab.route("**/demo/counter", (route) => route.fulfill(answer("rate_limited", 429)));
    await tab.goto(`${gatewayOrigin}/`);
    await tab.waitForFunction(() => /^\d+$/.test(document.getElementById("reaction-heart")!.textContent!));
    const hearts = await tab.textContent("#reaction-heart");
    await tab.click("#like");
    await tab.waitForFunction(() =>
      /Too many taps/.test(document.getElementById("like-status")!.textContent!),
    );
    expect(await tab.isEnabled("#like")).toBe(true);

    await tab.unroute("**/demo/counter");
    await tab.route("**/demo/counter", (route) => route.fulfill(answer("not_found", 404)));
    await tab.click('button[data-counter="reaction:heart"]');
    await tab.waitForFunction(() =>
      /only shows counts/.test(document.getElementById("reaction-status")!.textContent!),
    );
    for (const button of ["#like", "#notify", "#mark-read", 'button[data-counter="reaction:party"]'])
      expect(await tab.isDisabled(button), button).toBe(true);
    expect(await tab.textContent("#reaction-heart")).toBe(hearts);
  });
});

/**
 * The customer's site: a page on another origin that embeds the widget with one script tag.
 * Query: `page` (the page id), `mode` (set on both elements: `watch` makes a watch-only page),
 * `token` (a join token for a private page, set on both elements).
 */
function startHost(gatewayOrigin: string): Promise<Server> {
  const server = createServer((req, res) => {
    const query = new URL(req.url ?? "/", "http://host").searchParams;
    if (new URL(req.url ?? "/", "http://host").pathname !== "/") {
      res.writeHead(404).end();
      return;
    }
    const page = escapeHtml(query.get("page") ?? "article-1");
    const mode =
      (query.get("mode") ? ` mode="${escapeHtml(query.get("mode")!)}"` : "") +
      (query.get("token") ? ` token="${escapeHtml(query.get("token")!)}"` : "");
    // As strict as a publisher's site may be: the widget needs only its gateway, for the script and
    // the socket (README, "Embed the widget").
    const csp = `default-src 'none'; script-src ${gatewayOrigin}; connect-src ${gatewayOrigin.replace(/^http/, "ws")}`;
    res.writeHead(200, { "content-type": "text/html; charset=utf-8", "content-security-policy": csp })
      .end(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>host ${page}</title>
<script src="${gatewayOrigin}/livecount.js"></script>
</head>
<body>
<p><live-count id="viewers" page="${page}"${mode}></live-count> watching</p>
<p><live-count id="likes" page="${page}"${mode} counter="likes" placeholder="…"></live-count> likes</p>
</body>
</html>`);
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Waits until the element's text is `want`; on timeout, says what it showed instead. */
async function waitForText(tab: Page, selector: string, want: string): Promise<void> {
  try {
    await tab.waitForFunction(
      ([s, w]) => document.querySelector(s!)?.textContent === w,
      [selector, want] as const,
      {
        timeout: SETTLE_MS,
        polling: 50,
      },
    );
  } catch (err) {
    const got = await tab
      .evaluate((s) => document.querySelector(s)?.textContent ?? null, selector)
      .catch(() => null);
    throw new Error(`${selector} should show ${JSON.stringify(want)} but shows ${JSON.stringify(got)}`, {
      cause: err,
    });
  }
}

/** `values` without repeats of the value before. */
function distinct(values: readonly number[]): number[] {
  return values.filter((v, i) => i === 0 || v !== values[i - 1]);
}
