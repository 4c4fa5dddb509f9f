/**
 * The operators' console (/admin) in real headless Chromium, against a real deployment: nats-server,
 * redis-server, two counter nodes and a gateway from the built output. An operator signs in with the
 * admin key, searches pages by prefix (the listing reads itself again), opens one and reads each
 * data center's raw entries, deletes a counter, and watches a second counter node join in the
 * cluster view, where recent changes list it; all of it by keyboard where a person would, at
 * desktop and phone widths, with no page errors. Screenshots of each view are kept in
 * `.tmp/screenshots/console-*.png` for a person to look at.
 */
import { join } from "node:path";
import type { WebSocket } from "playwright-core";
import { afterAll, afterEach, beforeAll, expect, test } from "vitest";
import { CLUSTER_ADMIN_KEY } from "../support/cluster.js";
import { sleep } from "../support/eventually.js";
import { TestClient } from "../support/ws_client.js";
import {
  ConsoleScene,
  SCREENSHOTS,
  SETTLE_MS,
  TABLE_FOLLOWS_MS,
  describeWithConsole,
  listing,
  signIn,
  tabTo,
  tableValue,
} from "./console_page.js";

/** Likes sent to the busy page, one every 100 ms: 8 s of frames, time for three looks while they come. */
const BUSY_LIKES = 80;

describeWithConsole("console in Chromium against two counter nodes", () => {
  let scene: ConsoleScene;

  beforeAll(async () => {
    scene = await ConsoleScene.start();
  }, 60_000);

  afterEach(() => scene.closeTabs());

  afterAll(() => scene?.stop());

  test("console - sign in, search by prefix, open a page, read per-DC raw entries, delete a counter; by keyboard, no page errors", async () => {
    const tab = await scene.open(1280, 900);
    await expect.poll(() => tab.locator("input[type=password]").isVisible()).toBe(true);

    await signIn(tab, "not-the-admin-key-000");
    await expect.poll(() => tab.locator("#sign-in-error").textContent()).toContain("not the admin key");
    await tab.getByLabel("Admin key").fill("");
    await signIn(tab, CLUSTER_ADMIN_KEY);
    await expect
      .poll(() => tab.locator("#page-list li").count(), { timeout: SETTLE_MS })
      .toBeGreaterThanOrEqual(3);
    expect(await tab.evaluate(() => sessionStorage.getItem("livecount:admin-key"))).toBe(CLUSTER_ADMIN_KEY);

    // Search: only the pages under the prefix, each a link with its totals.
    await tab.locator("input[type=search]").focus();
    await tab.keyboard.type("console-");
    await tab.keyboard.press("Enter");
    await expect
      .poll(() => tab.locator("#page-list a").allTextContents(), { timeout: SETTLE_MS })
      .toEqual(["console-a", "console-b"]);
    expect(await tab.locator("#page-list li").first().textContent()).toContain(
      "1 viewer · likes 3, shares 2",
    );
    await tab.screenshot({ path: join(SCREENSHOTS, "console-pages-desktop.png"), fullPage: true });

    // Open the page by keyboard.
    await tabTo(tab, "console-a");
    await tab.keyboard.press("Enter");
    await expect.poll(() => tab.locator("#page-title").textContent()).toBe("console-a");
    // Polled, not read once: in one CI run a row read right after the tables appeared came back
    // without its cells' tabs (as an element not laid out does), and a poll reads it again.
    await expect
      .poll(() => tab.locator("#counters-table tbody tr").allInnerTexts(), { timeout: SETTLE_MS })
      .toEqual([
        expect.stringMatching(/^likes\t3\tp 3 · n 0\t–/),
        expect.stringMatching(/^shares\t2\tp 2 · n 0\t–/),
      ]);
    await expect
      .poll(() => tab.locator("#viewers-table tbody tr").allInnerTexts(), { timeout: SETTLE_MS })
      .toEqual(["dc1\tp 1 · n 0\t1\tyes"]);
    // The live chart is drawn from count frames over the WebSocket.
    await expect.poll(() => tab.locator("#chart canvas").count(), { timeout: SETTLE_MS }).toBe(1);
    await expect
      .poll(() => scene.countFrames.some((f) => f.includes('"type":"count"') && f.includes('"console-a"')), {
        timeout: SETTLE_MS,
      })
      .toBe(true);
    await expect.poll(() => tab.locator("#page-viewers").textContent(), { timeout: SETTLE_MS }).toBe("1");
    expect(await tab.locator(".total").innerText()).toBe("Viewers now: 1 (1 looking, 1 connection)");
    await tab.screenshot({ path: join(SCREENSHOTS, "console-page-desktop.png"), fullPage: true });

    // A second viewer: the per-DC table follows the headline within a moment, not a refresh later.
    const second = await TestClient.connect(scene.cluster.gateways[0]!.wsUrl);
    try {
      second.join("console-a", "someone-else");
      await expect.poll(() => tab.locator("#page-viewers").textContent(), { timeout: SETTLE_MS }).toBe("2");
      await expect
        .poll(() => tab.locator("#viewers-table tbody tr").allInnerTexts(), { timeout: TABLE_FOLLOWS_MS })
        .toEqual(["dc1\tp 2 · n 0\t2\tyes"]);
    } finally {
      await second.terminate();
    }
    await expect.poll(() => tab.locator("#page-viewers").textContent(), { timeout: SETTLE_MS }).toBe("1");
    await expect
      .poll(() => tab.locator("#viewers-table tbody tr").allInnerTexts(), { timeout: TABLE_FOLLOWS_MS })
      .toEqual(["dc1\tp 2 · n 1\t1\tyes"]);
    // What the page saw before: two at once at its peak, two distinct visitors.
    await expect
      .poll(() => tab.locator("#page-stats").textContent(), { timeout: SETTLE_MS })
      .toBe("Peak 2 in the last hour, 2 in the last day; 2 unique visitors in the last day (estimated).");

    // Delete "shares" with its button, confirming.
    tab.once("dialog", (d) => void d.accept());
    await tabTo(tab, "Delete shares");
    await tab.keyboard.press("Enter");
    await expect
      .poll(() => tab.locator("#counters-table tbody tr").allInnerTexts(), { timeout: SETTLE_MS })
      .toEqual([
        expect.stringMatching(/^likes\t3\t/),
        expect.stringMatching(/^shares\tdeleted\tp 2 · n 2\tdc1: 4/),
      ]);
    const read = await fetch(`${scene.cluster.gateways[0]!.url}/v1/pages/console-a/counter`);
    expect(((await read.json()) as { counters: Record<string, number> }).counters).toEqual({ likes: 3 });
    // A dismissed confirm deletes nothing: no DELETE leaves the page.
    const deletes: string[] = [];
    tab.on("request", (r) => {
      if (r.method() === "DELETE") deletes.push(r.url());
    });
    tab.once("dialog", (d) => void d.dismiss());
    await tab.getByRole("button", { name: "Delete likes" }).click();
    await tab.waitForTimeout(500);
    const again = await fetch(`${scene.cluster.gateways[0]!.url}/v1/pages/console-a/counter`);
    expect(((await again.json()) as { counters: Record<string, number> }).counters).toEqual({ likes: 3 });
    expect(deletes).toEqual([]);

    // Purge the tombstone from the cluster view: the deleted counter's raw entries leave the page view.
    await tab.getByRole("link", { name: "Cluster" }).click();
    await tab.getByLabel("Purge deleted counters older than (days)").fill("0");
    tab.once("dialog", (d) => void d.accept());
    await tab.getByRole("button", { name: "Purge" }).click();
    await expect
      .poll(() => tab.locator("#purge-status").textContent(), { timeout: SETTLE_MS })
      .toMatch(/^Purged 1 counter on 1 page in dc1; kept 0 /);
    await tab.screenshot({ path: join(SCREENSHOTS, "console-purge-desktop.png"), fullPage: true });
    await tab.evaluate(() => (location.hash = "#/page/console-a"));
    await expect
      .poll(() => tab.locator("#counters-table tbody tr").allInnerTexts(), { timeout: SETTLE_MS })
      .toEqual([expect.stringMatching(/^likes\t3\t/)]);

    expect(scene.pageErrors).toEqual([]);
  });

  test("console - a listing longer than a screen is paginated: Next, Previous and First walk it with the opaque cursor", async () => {
    const tab = await scene.open(1280, 900);
    await signIn(tab, CLUSTER_ADMIN_KEY);
    await tab.locator("input[type=search]").fill("bulk-");
    await tab.keyboard.press("Enter");
    const names = (): Promise<string[]> => tab.locator("#page-list a").allTextContents();
    const all = Array.from({ length: 30 }, (_, i) => `bulk-${String(i).padStart(2, "0")}`);
    await expect.poll(names, { timeout: SETTLE_MS }).toEqual(all.slice(0, 25));
    // The listing of every page (shown on sign-in) starts with the same names: Next belongs to the
    // filtered one only once its status says so.
    await expect
      .poll(() => tab.locator("#pages-status").textContent(), { timeout: SETTLE_MS })
      .toBe('Pages 1–25 starting with "bulk-".');
    expect(await tab.getByRole("button", { name: "Previous" }).isDisabled()).toBe(true);
    await tab.getByRole("button", { name: "Next" }).click();
    await expect.poll(names, { timeout: SETTLE_MS }).toEqual(all.slice(25));
    expect(await tab.getByRole("button", { name: "Next" }).isDisabled()).toBe(true);
    expect(await tab.locator("#pages-status").textContent()).toBe('Pages 26–30 starting with "bulk-".');
    await tab.getByRole("button", { name: "Previous" }).click();
    await expect.poll(names, { timeout: SETTLE_MS }).toEqual(all.slice(0, 25));
    expect(scene.pageErrors).toEqual([]);
  });

  test("console - the listing shown reads itself again: a page that appears is listed without a click", async () => {
    const tab = await scene.open(1280, 900);
    await signIn(tab, CLUSTER_ADMIN_KEY);
    await tab.locator("input[type=search]").fill("fresh-");
    await tab.keyboard.press("Enter");
    const status = (): Promise<string | null> => tab.locator("#pages-status").textContent();
    await expect.poll(status, { timeout: SETTLE_MS }).toBe('No pages starting with "fresh-".');
    await scene.publish("fresh-1", "likes", 4);
    await expect
      .poll(() => tab.locator("#page-list li").allInnerTexts(), { timeout: SETTLE_MS })
      .toEqual([expect.stringMatching(/^fresh-1\s+0 viewers · likes 4$/)]);
    expect(await status()).toBe('Pages 1–1 starting with "fresh-".');
    // A link keeps the keyboard focus across the next reads.
    await tab.locator("#page-list a").first().focus();
    await scene.publish("fresh-1", "likes-2", 1);
    await expect
      .poll(() => tab.locator("#page-list li").first().innerText(), { timeout: SETTLE_MS })
      .toMatch(/likes-2 1/);
    expect(await tab.evaluate(() => document.activeElement?.textContent)).toBe("fresh-1");
    expect(scene.pageErrors).toEqual([]);
  });

  test("console - the cluster view shows the node, the gateway and the DC, and a second counter node appearing", async () => {
    const tab = await scene.open(1280, 900);
    await signIn(tab, CLUSTER_ADMIN_KEY);
    await tab.getByRole("link", { name: "Cluster" }).click();
    await expect.poll(() => tab.locator("#nodes-table tbody tr").count(), { timeout: SETTLE_MS }).toBe(1);
    expect(await tab.locator("#nodes-table tbody tr").first().innerText()).toMatch(
      /^counter-1\tready\t64 of 64 assigned/,
    );
    expect(await tab.locator("#dcs-table tbody tr").allInnerTexts()).toEqual([
      expect.stringMatching(/^dc1 \(this one\)\tlive\t0 ms/),
    ]);
    expect(await tab.locator("#gateways-table tbody tr").first().innerText()).toMatch(/\(this one\)\t1\t1\t/);

    await scene.cluster.counters[1]!.start();
    await expect
      .poll(() => tab.locator("#nodes-table tbody tr").allInnerTexts(), { timeout: SETTLE_MS })
      .toEqual([
        expect.stringMatching(/^counter-1\tready\t\d+ of \d+ assigned/),
        expect.stringMatching(/^counter-2\tready\t\d+ of \d+ assigned/),
      ]);
    const held = (await tab.locator("#nodes-table tbody tr td:nth-child(3)").allTextContents()).map((t) =>
      Number(t.split(" ")[0]),
    );
    expect(held.reduce((a, b) => a + b, 0)).toBe(64);
    expect(Math.min(...held)).toBeGreaterThan(0);
    // Recent changes keep what the tables no longer show: counter-2, stopped before, is back.
    await expect
      .poll(() => tab.locator("#events-table tbody tr").first().innerText(), { timeout: SETTLE_MS })
      .toMatch(/\(\d+ s ago\)\tcounter node counter-2\tjoined the ring$/);
    await tab.screenshot({ path: join(SCREENSHOTS, "console-cluster-desktop.png"), fullPage: true });
    // Leaving the view stops its refreshes, also one in flight when the operator navigated.
    const statusRequests: string[] = [];
    tab.on("request", (r) => {
      if (r.url().includes("/v1/admin/status")) statusRequests.push(r.url());
    });
    await tab.getByRole("link", { name: "Pages" }).click();
    await tab.waitForTimeout(4_500);
    expect(statusRequests.length).toBeLessThanOrEqual(1);
    expect(scene.pageErrors).toEqual([]);
  });

  test("console - a busy page's tables keep up with its count frames, not only once they stop", async () => {
    const tab = await scene.open(1280, 900);
    await signIn(tab, CLUSTER_ADMIN_KEY);
    // Signed in before the page is opened: the sign-in's own routing comes first.
    await expect.poll(() => tab.locator("#nav").isVisible(), { timeout: SETTLE_MS }).toBe(true);
    await tab.goto(`${scene.cluster.gateways[0]!.url}/admin#/page/busy-page`);
    await scene.publish("busy-page", "likes", 1, "busy-0");
    await expect.poll(() => tableValue(tab, "likes"), { timeout: SETTLE_MS }).toBe("1");
    // A like every 100 ms: frames come faster than the tables' 250 ms re-read after a frame. Each
    // is sent on time, not after the last one's answer: on a loaded host an answer takes several
    // times that, and likes sent one after another would stretch the test past its timeout.
    const reads: number[] = [];
    tab.on("request", (r) => void (r.url().includes("/v1/admin/pages/busy-page") && reads.push(Date.now())));
    let sent = 1;
    let busy = true;
    const likes = (async () => {
      const answers: Array<Promise<void>> = [];
      for (let i = 1; i <= BUSY_LIKES; i++) {
        answers.push(scene.publish("busy-page", "likes", 1, `busy-${i}`).then(() => void sent++));
        await sleep(100);
      }
      await Promise.all(answers);
      busy = false;
    })();
    // Three looks while likes keep coming: each sees the table move on past the last, within a
    // read or two (about one a second while frames come), long before the likes stop.
    let seen = 1;
    for (let look = 1; look <= 3; look++) {
      await expect
        .poll(async () => Number(await tableValue(tab, "likes")), { timeout: 2 * TABLE_FOLLOWS_MS })
        .toBeGreaterThan(seen);
      expect(busy, `look ${look}: made while likes kept coming`).toBe(true);
      seen = Number(await tableValue(tab, "likes"));
    }
    await likes;
    // About one read a second while frames keep coming, not one per frame.
    const busyS = (reads.at(-1)! - reads[0]!) / 1000;
    expect(reads.length).toBeLessThanOrEqual(Math.ceil(busyS) + 2);
    await expect.poll(() => tableValue(tab, "likes"), { timeout: TABLE_FOLLOWS_MS }).toBe(String(sent));
    expect(scene.pageErrors).toEqual([]);
  });

  test("console - a page id the gateway refuses shows nothing of the page before; Back returns to the listing page left", async () => {
    const tab = await scene.open(1280, 900);
    // Before signing in there is nothing to navigate to.
    expect(await tab.locator("#nav").isVisible()).toBe(false);
    await signIn(tab, CLUSTER_ADMIN_KEY);
    await tab.goto(`${scene.cluster.gateways[0]!.url}/admin#/page/console-a`);
    await expect.poll(() => tab.locator("#counters-table tbody tr").count(), { timeout: SETTLE_MS }).toBe(1);
    expect(await tab.title()).toBe("console-a · livecount console");
    await tab.evaluate(() => (location.hash = "#/page/a%20b"));
    await expect
      .poll(() => tab.locator("#page-error").textContent(), { timeout: SETTLE_MS })
      .toMatch(/^Not a page id the gateway takes: /);
    expect(await tab.locator("#counters-table tr").count()).toBe(0);
    expect(await tab.getByRole("button", { name: /^Delete/ }).count()).toBe(0);
    // Refused once, refused always: it is not read again.
    const rereads: string[] = [];
    tab.on("request", (r) => void (r.url().includes("/v1/admin/pages/a%20b") && rereads.push(r.url())));
    await tab.waitForTimeout(2_500);
    expect(rereads).toEqual([]);

    await tab.evaluate(() => (location.hash = `#/pages?prefix=bulk-`));
    await expect
      .poll(() => tab.locator("#pages-status").textContent(), { timeout: SETTLE_MS })
      .toBe('Pages 1–25 starting with "bulk-".');
    await tab.getByRole("button", { name: "Next" }).click();
    await expect
      .poll(() => tab.locator("#pages-status").textContent(), { timeout: SETTLE_MS })
      .toBe('Pages 26–30 starting with "bulk-".');
    // Paging keeps the focus on the pager: Next, off on the last page, hands it to Previous.
    expect(await tab.evaluate(() => document.activeElement?.id)).toBe("previous-page");
    // Back across another search returns to the second listing page of the first.
    await tab.locator("input[type=search]").fill("console-");
    await tab.keyboard.press("Enter");
    await expect
      .poll(() => tab.locator("#pages-status").textContent(), { timeout: SETTLE_MS })
      .toMatch(/starting with "console-"/);
    await tab.goBack();
    await expect
      .poll(() => tab.locator("#pages-status").textContent(), { timeout: SETTLE_MS })
      .toBe('Pages 26–30 starting with "bulk-".');
    await tab.getByRole("link", { name: "bulk-27" }).click();
    await expect.poll(() => tab.locator("#page-title").textContent()).toBe("bulk-27");
    await tab.goBack();
    await expect
      .poll(() => tab.locator("#pages-status").textContent(), { timeout: SETTLE_MS })
      .toBe('Pages 26–30 starting with "bulk-".');
    // Focus lands on the view's heading after each navigation.
    expect(await tab.evaluate(() => document.activeElement?.id)).toBe("pages-title");
    // The browser logs the refused id's two reads (the page and its stats) as failed resources.
    expect(scene.pageErrors.filter((e) => !e.includes("status of 400"))).toEqual([]);
  });

  test("console - the chart follows the window's width both ways", async () => {
    const tab = await scene.open(1400, 900);
    await signIn(tab, CLUSTER_ADMIN_KEY);
    await tab.goto(`${scene.cluster.gateways[0]!.url}/admin#/page/console-a`);
    const chartWidth = (): Promise<number> =>
      tab.evaluate(() => document.querySelector("#chart canvas")!.getBoundingClientRect().width);
    await expect.poll(chartWidth, { timeout: SETTLE_MS }).toBeGreaterThan(1000);
    await tab.setViewportSize({ width: 390, height: 800 });
    await expect.poll(chartWidth, { timeout: SETTLE_MS }).toBeLessThan(390);
    expect(await tab.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    await tab.setViewportSize({ width: 1400, height: 900 });
    await expect.poll(chartWidth, { timeout: SETTLE_MS }).toBeGreaterThan(1000);
    expect(scene.pageErrors).toEqual([]);
  });

  test("console - at 375 px wide every view fits the screen (tables scroll inside their box)", async () => {
    const tab = await scene.open(375, 740);
    await signIn(tab, CLUSTER_ADMIN_KEY);
    await expect.poll(() => listing(tab), { timeout: SETTLE_MS }).toBe("listed");
    const fits = (): Promise<boolean> =>
      tab.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
    expect(await fits()).toBe(true);
    await tab.screenshot({ path: join(SCREENSHOTS, "console-pages-phone.png"), fullPage: true });
    await tab.goto(`${scene.cluster.gateways[0]!.url}/admin#/page/console-a`);
    // likes (shares was deleted and purged by the first test).
    await expect.poll(() => tab.locator("#counters-table tbody tr").count(), { timeout: SETTLE_MS }).toBe(1);
    expect(await fits()).toBe(true);
    await tab.screenshot({ path: join(SCREENSHOTS, "console-page-phone.png"), fullPage: true });
    // A page id of the longest kind, without a space, wraps in its heading.
    await tab.goto(`${scene.cluster.gateways[0]!.url}/admin#/page/${"x".repeat(128)}`);
    await expect.poll(() => tab.locator("#page-title").textContent()).toBe("x".repeat(128));
    expect(await fits()).toBe(true);
    await tab.goto(`${scene.cluster.gateways[0]!.url}/admin#/cluster`);
    await expect.poll(() => tab.locator("#nodes-table tbody tr").count(), { timeout: SETTLE_MS }).toBe(2);
    expect(await fits()).toBe(true);
    await tab.screenshot({ path: join(SCREENSHOTS, "console-cluster-phone.png"), fullPage: true });
    expect(scene.pageErrors).toEqual([]);
  });

  // Last: it stops and restarts the gateway every other test uses.
  test("console - a gateway gone greys out what the view shows and says since when; back, it reads again", async () => {
    const tab = await scene.open(1280, 900);
    await signIn(tab, CLUSTER_ADMIN_KEY);
    const frames: string[] = [];
    const sockets: WebSocket[] = [];
    tab.on("websocket", (ws) => {
      sockets.push(ws);
      ws.on("framereceived", (f) => frames.push(String(f.payload)));
    });
    await tab.goto(`${scene.cluster.gateways[0]!.url}/admin#/page/console-a`);
    await expect.poll(() => tab.locator("#counters-table tbody tr").count(), { timeout: SETTLE_MS }).toBe(1);
    // The live socket watches the page (its first count frame came) before the gateway goes: a
    // socket lost before that says "unavailable", not "lost".
    await expect
      .poll(() => frames.some((f) => f.includes('"type":"count"') && f.includes('"console-a"')), {
        timeout: SETTLE_MS,
      })
      .toBe(true);
    // The browser logs each refused read and socket: expected while the gateway is gone.
    scene.pageErrors.splice(0);
    const opened = sockets.length;
    await scene.cluster.gateways[0]!.kill();
    await expect
      .poll(() => tab.locator("#page-error").textContent(), { timeout: SETTLE_MS })
      .toMatch(/^Could not read the page: .*Shown: as of \d/);
    expect(await tab.locator("#page-data").getAttribute("class")).toBe("stale");
    // Still "lost" once a try to reconnect has failed, not "unavailable" (never there).
    await expect
      .poll(() => sockets.length > opened && sockets.at(-1)!.isClosed(), { timeout: SETTLE_MS })
      .toBe(true);
    expect(await tab.locator("#live-status").textContent()).toMatch(/^Live updates lost; reconnecting/);
    await tab.screenshot({ path: join(SCREENSHOTS, "console-page-gateway-down.png"), fullPage: true });

    await scene.cluster.gateways[0]!.start();
    await expect.poll(() => tab.locator("#page-error").textContent(), { timeout: SETTLE_MS }).toBe("");
    expect(await tab.locator("#page-data").getAttribute("class")).toBe("");
    await expect.poll(() => tab.locator("#live-status").textContent(), { timeout: SETTLE_MS }).toBe("");
  });
});
