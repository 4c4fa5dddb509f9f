/**
 * The <live-count> widget in real headless Chromium against a real standalone gateway.
 *
 * The host pages come from a different origin (127.0.0.1:<host port>) than the gateway
 * (localhost:<gateway port>), as on a customer's site: the widget must find its server from its
 * own script URL. Every browser context is a separate browser profile, so a separate viewer.
 */
import { signJoinToken } from "@livecount/sdk";
import { startStandalone } from "@livecount/standalone";
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { describeWithChromium } from "../support/chromium.js";
import {
  JOIN_SECRET,
  PRIVATE_PREFIX,
  PUBLISHER_KEY,
  SETTLE_MS,
  WidgetSite,
  distinct,
  waitForText,
} from "./widget_page.js";

describeWithChromium("widget in Chromium", () => {
  let site: WidgetSite;

  beforeAll(async () => {
    site = await WidgetSite.start();
  });

  afterAll(() => site?.close());

  afterEach(async () => {
    await site.closeBrowsers();
    // The widget must never throw into the host page, whatever the server answers.
    expect(site.pageErrors.splice(0)).toEqual([]);
  });

  it("counts one viewer per browser and drops a closed browser after the grace window", async () => {
    const first = await site.open(await site.newBrowser(), "article-1");
    await waitForText(first, "#viewers", "1");

    const secondBrowser = await site.newBrowser();
    const second = await site.open(secondBrowser, "article-1");
    await waitForText(second, "#viewers", "2");
    await waitForText(first, "#viewers", "2");

    await secondBrowser.close();
    await waitForText(first, "#viewers", "1");
  });

  it("shows a joining viewer's page with the viewer in it from the first value on, never the count before it", async () => {
    const page = "article-first-value";
    const first = await site.open(await site.newBrowser(), page);
    await waitForText(first, "#viewers", "1");
    // The gateway holds the page's count (1) when the second browser joins: that frame is the page
    // before this viewer, and the widget holds it back for FIRST_HOLD_MS, showing the owner's count
    // with the viewer (2) instead when it comes within that time.
    const second = await site.open(await site.newBrowser(), page);
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
    const holdMs = 250; // FIRST_HOLD_MS in packages/widget/src/connections.ts
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
    const context = await site.newBrowser();
    const first = await site.open(context, "article-2");
    await waitForText(first, "#viewers", "1");
    const second = await site.open(context, "article-2");
    await waitForText(second, "#viewers", "1");
    // Another browser joins after the second tab, so once it is counted the second tab's join has
    // been applied too: two viewers, not three.
    const other = await site.open(await site.newBrowser(), "article-2");
    for (const tab of [first, second, other]) await waitForText(tab, "#viewers", "2");
    expect(await site.viewersOverHttp("article-2")).toBe(2);

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
    const tab = await site.open(await site.newBrowser(), "article-1");
    await waitForText(tab, "#likes", "0");

    await site.like("article-1", "widget-test-like-1");

    await waitForText(tab, "#likes", "1");
    const last = await tab.evaluate(() => window.__details.at(-1));
    expect(last).toMatchObject({ page: "article-1", counters: { likes: 1 } });
    // Which data centers make up the value, and how stale the stalest is: one, fresh, here.
    expect(last).toMatchObject({ dcs: ["dc1"], lag_ms: 0 });
  });

  it("joins an element added after load over the page's single socket and leaves when it is removed", async () => {
    const tab = await site.open(await site.newBrowser(), "article-3");
    await waitForText(tab, "#viewers", "1");

    await tab.evaluate(() => {
      document.body.insertAdjacentHTML(
        "beforeend",
        '<live-count id="added" page="article-4"></live-count><live-count id="added-watch" page="article-3" mode="watch"></live-count>',
      );
    });
    await waitForText(tab, "#added", "1");
    await waitForText(tab, "#added-watch", "1");
    expect(await site.viewersOverHttp("article-4")).toBe(1);
    expect(await site.viewersOverHttp("article-3")).toBe(1);

    await tab.evaluate(() => document.getElementById("added")!.remove());
    await expect.poll(() => site.viewersOverHttp("article-4"), { timeout: SETTLE_MS, interval: 100 }).toBe(0);
    expect(await site.viewersOverHttp("article-3")).toBe(1);
    expect(await tab.evaluate(() => window.__sockets.length)).toBe(1);
  });

  it("negotiates counts frames on its one socket and shows every page's changes from them", async () => {
    const tab = await site.open(await site.newBrowser(), "article-c1");
    await waitForText(tab, "#likes", "0");
    const from = await tab.evaluate(() => {
      document.body.insertAdjacentHTML("beforeend", '<live-count id="c2" page="article-c2" counter="likes">');
      return window.__received.length;
    });
    await waitForText(tab, "#c2", "0");
    await Promise.all(["article-c1", "article-c2"].map((page) => site.like(page, `widget-counts-${page}`)));
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
    const tab = await site.open(await site.newBrowser(), "article-7");
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
    expect(await site.viewersOverHttp("article-7")).toBe(1);
    // Within the grace window a reconnect produces no dip.
    expect(await tab.evaluate((n) => window.__details.slice(n).map((d) => d.viewers), before)).not.toContain(
      0,
    );
  });

  it("shows the count to a watch-only element without counting it as a viewer", async () => {
    const watcher = await site.open(await site.newBrowser(), "article-5", { mode: "watch" });
    await waitForText(watcher, "#viewers", "0");

    const viewer = await site.open(await site.newBrowser(), "article-5");
    await waitForText(viewer, "#viewers", "1");
    await waitForText(watcher, "#viewers", "1");
    expect(await site.viewersOverHttp("article-5")).toBe(1);
  });

  it("marks elements with an invalid page id as invalid_page and keeps the others live", async () => {
    const context = await site.newBrowser();
    const tab = await site.open(context, "article-6");
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
    const other = await site.open(await site.newBrowser(), "article-6");
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
      const tab = await (await site.newBrowser()).newPage();
      tab.on("pageerror", (err) => site.pageErrors.push(`strict: ${err.message}`));
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
    const first = await site.open(await site.newBrowser(), page, { token });
    await waitForText(first, "#viewers", "1");
    // Another browser with alice's token is alice again: still one viewer.
    const second = await site.open(await site.newBrowser(), page, { token });
    await waitForText(second, "#viewers", "1");
    const bob = await site.open(await site.newBrowser(), page, {
      token: await signJoinToken({ secret: JOIN_SECRET, viewer: "bob", prefix: PRIVATE_PREFIX }),
    });
    await waitForText(bob, "#viewers", "2");
    expect(await site.viewersOverHttp(page)).toBe(2);

    const stranger = await site.open(await site.newBrowser(), page);
    await stranger.waitForFunction(
      () => document.getElementById("viewers")?.getAttribute("data-error") === "unauthorized",
      undefined,
      { timeout: SETTLE_MS },
    );
    expect(await stranger.evaluate(() => document.getElementById("viewers")!.textContent)).toBe("");
    expect(await site.viewersOverHttp(page)).toBe(2);
  });

  it("serves the demo page, which shows who is watching and counts a like", async () => {
    const tab = await (await site.newBrowser()).newPage();
    tab.on("pageerror", (err) => site.pageErrors.push(`demo: ${err.message}`));
    // Every request the page makes is answered; its icon is in the page (headless Chromium asks for
    // no /favicon.ico, a browser does without one).
    const failed: string[] = [];
    tab.on("response", (res) => void (res.status() >= 400 && failed.push(`${res.status()} ${res.url()}`)));
    await tab.goto(`${site.gatewayOrigin}/`);
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
    const tab = await (await site.newBrowser()).newPage();
    tab.on("pageerror", (err) => site.pageErrors.push(`demo: ${err.message}`));
    await tab.goto(`${site.gatewayOrigin}/`);
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
    const tab = await (await site.newBrowser()).newPage();
    tab.on("pageerror", (err) => site.pageErrors.push(`demo: ${err.message}`));
    const answer = (code: string, status: number) => ({
      status,
      contentType: "application/json",
      body: JSON.stringify({ error: { code, message: code } }),
    });
    await tab.route("**/demo/counter", (route) => route.fulfill(answer("rate_limited", 429)));
    await tab.goto(`${site.gatewayOrigin}/`);
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
