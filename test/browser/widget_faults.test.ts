/**
 * The <live-count> widget in real headless Chromium when things go wrong around it: frames past the
 * socket's budget, pages past the socket's room, the page kept in the back/forward cache, the
 * network gone and back, a socket that dies without a close, every element removed, a `server`
 * attribute written without its scheme.
 * Each must end with every element showing its page's right number and the server counting this
 * viewer where it is, and nowhere else.
 */
import type { Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { describeWithChromium } from "../support/chromium.js";
import { SETTLE_MS, WidgetSite, waitForText } from "./widget_page.js";

/** Pages one socket may hold (LIVECOUNT_MAX_PAGES_PER_SOCKET's default). */
const PAGES_PER_SOCKET = 64;
/** How often the widget looks whether its socket heard anything (PING_MS in the widget). */
const PING_MS = 25_000;

describeWithChromium("widget in Chromium, when things go wrong", () => {
  let site: WidgetSite;

  beforeAll(async () => {
    site = await WidgetSite.start({ backForwardCache: true, proxy: true });
  });

  afterAll(() => site?.close());

  afterEach(async () => {
    await site.closeBrowsers();
    site.warnings.splice(0);
    expect(site.pageErrors.splice(0)).toEqual([]);
  });

  /** Adds one element per page id to the tab, in one task. */
  function addElements(tab: Page, pages: readonly string[]): Promise<void> {
    return tab.evaluate((ids) => {
      for (const id of ids) {
        const el = document.createElement("live-count");
        el.id = id;
        el.setAttribute("page", id);
        document.body.append(el);
      }
    }, pages);
  }

  async function waitForViewersOverHttp(page: string, want: number): Promise<void> {
    await expect.poll(() => site.viewersOverHttp(page), { timeout: SETTLE_MS, interval: 100 }).toBe(want);
  }

  it("frames past the socket's budget (elements switched in one task): a new socket, every element shows its page, the pages left count nobody", async () => {
    const tab = await site.open(await site.newBrowser(), "budget-home");
    await waitForText(tab, "#viewers", "1");
    const ids = Array.from({ length: 60 }, (_, i) => `e${i}`);
    await tab.evaluate((all) => {
      for (const id of all) {
        const el = document.createElement("live-count");
        el.id = id;
        el.setAttribute("page", `budget-a-${id}`);
        document.body.append(el);
      }
    }, ids);
    for (const id of ids) await waitForText(tab, `#${id}`, "1");
    // 60 leaves and 60 joins at once against a budget of 100 frames (LIVECOUNT_SOCKET_BURST): the
    // frames past it are refused with an error that names no page.
    await tab.evaluate((all) => {
      for (const id of all) document.getElementById(id)!.setAttribute("page", `budget-b-${id}`);
    }, ids);
    for (const id of ids) await waitForText(tab, `#${id}`, "1");
    const refusals = await tab.evaluate(
      () => window.__received.filter((r) => /"rate_limited"/.test(r.data) && !/"page"/.test(r.data)).length,
    );
    expect(refusals).toBeGreaterThan(0);
    // The widget started over on a new socket rather than guess which frames went through.
    expect(await tab.evaluate(() => window.__sockets.length)).toBe(2);
    for (const id of ids) expect(await site.viewersOverHttp(`budget-b-${id}`)).toBe(1);
    for (const id of ids)
      await expect
        .poll(() => site.viewersOverHttp(`budget-a-${id}`), { timeout: SETTLE_MS, interval: 200 })
        .toBe(0);
    expect(await site.viewersOverHttp("budget-home")).toBe(1);
  });

  it("pages refused for want of room on the socket are asked for again when another page leaves it", async () => {
    const tab = await site.open(await site.newBrowser(), "room-0");
    await waitForText(tab, "#viewers", "1");
    const more = Array.from({ length: PAGES_PER_SOCKET + 1 }, (_, i) => `room-${i + 1}`);
    await addElements(tab, more);
    // room-0 and the first 63 of these fill the socket; the last two are refused.
    for (const page of more.slice(0, PAGES_PER_SOCKET - 1)) await waitForText(tab, `#${page}`, "1");
    for (const page of more.slice(PAGES_PER_SOCKET - 1))
      await tab.waitForFunction(
        (id) => document.getElementById(id)?.getAttribute("data-error") === "too_many_pages",
        page,
        {
          timeout: SETTLE_MS,
        },
      );
    // Each refusal is in the console too, for the publisher's developer.
    for (const page of more.slice(PAGES_PER_SOCKET - 1))
      expect(site.warnings).toContainEqual(
        expect.stringMatching(new RegExp(`^livecount: ${page} too_many_pages `)),
      );
    await tab.evaluate(() => ["room-1", "room-2"].forEach((id) => document.getElementById(id)!.remove()));
    for (const page of more.slice(PAGES_PER_SOCKET - 1)) {
      await waitForText(tab, `#${page}`, "1");
      expect(await tab.evaluate((id) => document.getElementById(id)!.hasAttribute("data-error"), page)).toBe(
        false,
      );
      await waitForViewersOverHttp(page, 1);
    }
    expect(await tab.evaluate(() => window.__sockets.length)).toBe(1);
  });

  it("a page kept in the back/forward cache stops counting, and counts again when it is shown", async () => {
    const context = await site.newBrowser();
    const tab = await site.open(context, "bfcache-a");
    await waitForText(tab, "#viewers", "1");
    await tab.evaluate(() =>
      addEventListener(
        "pageshow",
        (e) => ((window as unknown as { __restored: boolean }).__restored = e.persisted),
      ),
    );
    await tab.goto(`${site.hostOrigin}/?page=bfcache-b`);
    await waitForText(tab, "#viewers", "1");
    await waitForViewersOverHttp("bfcache-a", 0);
    // A page restored from the cache fires no load event: the navigation's commit is its return.
    await tab.goBack({ waitUntil: "commit" });
    await tab.waitForFunction(
      () => (window as unknown as { __restored?: boolean }).__restored === true,
      undefined,
      {
        timeout: SETTLE_MS,
      },
    );
    await waitForViewersOverHttp("bfcache-a", 1);
    await waitForText(tab, "#viewers", "1");
    await tab.waitForFunction(
      () => !document.getElementById("viewers")!.hasAttribute("data-error"),
      undefined,
      {
        timeout: SETTLE_MS,
      },
    );
  });

  it("the network gone: elements say offline at once; back, they are live again without waiting out the backoff", async () => {
    const context = await site.newBrowser();
    const tab = await site.open(context, "offline-a");
    await waitForText(tab, "#viewers", "1");
    await context.setOffline(true);
    await tab.waitForFunction(
      () => document.getElementById("viewers")!.getAttribute("data-error") === "offline",
      undefined,
      { timeout: 2000 },
    );
    // The last number known stays.
    expect(await tab.evaluate(() => document.getElementById("viewers")!.textContent)).toBe("1");
    await context.setOffline(false);
    // Live again: a like made now shows.
    await site.like("offline-a", "widget-offline-like");
    await waitForText(tab, "#likes", "1");
    await tab.waitForFunction(() => !document.querySelector("live-count[data-error]"), undefined, {
      timeout: SETTLE_MS,
    });
    expect(await site.viewersOverHttp("offline-a")).toBe(1);
  });

  it("a socket that dies without a close (its flow forgotten on the way) is given up after a ping goes unanswered; a quiet live one is kept", async () => {
    const context = await site.newBrowser();
    // The tab's timers run on a clock the test moves: the widget's looks are PING_MS apart.
    await context.clock.install();
    const tab = await site.open(context, "stalled-a");
    await waitForText(tab, "#viewers", "1");
    const pongs = (): Promise<number> =>
      tab.evaluate(() => window.__received.filter((r) => r.data === '{"type":"pong"}').length);
    // A quiet page: the first look finds the count frames of the join, the second nothing since, so
    // it pings; the pong keeps the socket.
    await context.clock.runFor(PING_MS);
    await context.clock.runFor(PING_MS);
    await expect.poll(pongs, { timeout: SETTLE_MS }).toBe(1);
    await context.clock.runFor(PING_MS);
    expect(await tab.evaluate(() => window.__sockets.length)).toBe(1);
    // Now the flow is forgotten between the tab and the gateway: neither hears the other, and the
    // browser is told nothing. A like made meanwhile cannot reach this socket.
    site.proxy!.stallOpen();
    await site.like("stalled-a", "widget-stalled-like");
    // The look after the pong's finds nothing since: a ping, unanswered; the next gives the socket
    // up and a new one joins again, with the like.
    await context.clock.runFor(PING_MS);
    await context.clock.runFor(PING_MS);
    await waitForText(tab, "#likes", "1");
    expect(await tab.evaluate(() => window.__sockets.length)).toBe(2);
    // The first is closed from the tab's side, not left to answer.
    expect(await tab.evaluate(() => window.__sockets[0]!.readyState !== WebSocket.OPEN)).toBe(true);
    await tab.waitForFunction(() => !document.querySelector("live-count[data-error]"), undefined, {
      timeout: SETTLE_MS,
    });
    // The viewer still counts once (the gateway holds the stalled socket under the same viewer id).
    expect(await site.viewersOverHttp("stalled-a")).toBe(1);
    expect(await pongs()).toBe(1);
  });

  it("no element left to show (a single-page app's route without widgets) closes the socket; the next element opens one", async () => {
    const tab = await site.open(await site.newBrowser(), "route-a");
    await waitForText(tab, "#viewers", "1");
    await tab.evaluate(() => document.querySelectorAll("live-count").forEach((el) => el.remove()));
    await tab.waitForFunction(() => window.__sockets[0]!.readyState === WebSocket.CLOSED, undefined, {
      timeout: SETTLE_MS,
    });
    await waitForViewersOverHttp("route-a", 0);
    // An invalid id alone needs no socket either.
    await tab.evaluate(() =>
      document.body.insertAdjacentHTML("beforeend", '<live-count page="not valid"></live-count>'),
    );
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(await tab.evaluate(() => window.__sockets.length)).toBe(1);
    expect(site.warnings).toContain("livecount: not valid invalid_page");
    await addElements(tab, ["route-b"]);
    await waitForText(tab, "#route-b", "1");
    expect(await tab.evaluate(() => window.__sockets.length)).toBe(2);
  });

  it("a server attribute without its scheme names that host on the page's scheme", async () => {
    const tab = await site.open(await site.newBrowser(), "scheme-home");
    await waitForText(tab, "#viewers", "1");
    // The script's own gateway spelled host:port, which URL parsing takes for a scheme: the same
    // server, so the same socket (the host page's Content-Security-Policy allows no other).
    const host = new URL(site.gatewayOrigin).host;
    await tab.evaluate((server) => {
      const el = document.createElement("live-count");
      el.id = "schemeless";
      el.setAttribute("page", "scheme-a");
      el.setAttribute("server", server);
      document.body.append(el);
    }, host);
    await waitForText(tab, "#schemeless", "1");
    expect(await site.viewersOverHttp("scheme-a")).toBe(1);
    expect(await tab.evaluate(() => window.__sockets.map((w) => w.url))).toEqual([`ws://${host}/ws`]);
  });
});
