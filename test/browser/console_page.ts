/**
 * The console's world for console.test.ts: a cluster of two counter nodes (the second stopped, to be
 * seen joining) and a gateway, pages with counters and one viewer on them, and Chromium tabs on
 * /admin that record their page errors and every WebSocket frame they receive; and the keyboard
 * moves an operator makes there.
 */
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { expect } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { BROWSER_TEST_MS, CHROMIUM_PATH, launchChromium } from "../support/chromium.js";
import { CLUSTER_PUBLISHER_KEY, TestCluster } from "../support/cluster.js";
import { eventually } from "../support/eventually.js";
import { natsServerAvailable } from "../support/nats_server.js";
import { redisServerAvailable } from "../support/redis_server.js";
import { TestClient } from "../support/ws_client.js";

export const SCREENSHOTS = join(process.cwd(), ".tmp", "screenshots");
/** How long a change may take to show: the console refreshes every 2 s, a node joins in a few. */
export const SETTLE_MS = 20_000;
/** The page view's tables are read again a quarter second after a count frame (its refresh: 2 s). */
export const TABLE_FOLLOWS_MS = 1500;

/** `describe` for suites that need Chromium, nats-server and redis-server (describeWithBinary). */
export function describeWithConsole(name: string, fn: () => void): void {
  describeWithBinary(
    existsSync(CHROMIUM_PATH) && natsServerAvailable() && redisServerAvailable(),
    "chromium, nats-server and redis-server are required",
    name,
    fn,
    { timeout: BROWSER_TEST_MS },
  );
}

/**
 * Leases of a few seconds, not the suite's 1.5 to 2 (test/support/cluster.ts): these tests run at
 * nice 19 beside the timed clusters, where a stalled counter node lost its partitions with the short
 * ones and the console's reads waited on them. Nothing here is timed by a lease.
 */
const SCENE_LEASES = {
  LIVECOUNT_NODE_LEASE_MS: "4000",
  LIVECOUNT_PARTITION_LEASE_MS: "5000",
  LIVECOUNT_GATEWAY_LEASE_MS: "5000",
};

/** The cluster, its pages and viewer, and the browser an operator opens the console in. */
export class ConsoleScene {
  readonly pageErrors: string[] = [];
  /** Every WebSocket frame the console received, as text. */
  readonly countFrames: string[] = [];
  private readonly contexts: BrowserContext[] = [];
  private browser: Browser | undefined;
  private viewer: TestClient | undefined;

  private constructor(readonly cluster: TestCluster) {}

  static async start(): Promise<ConsoleScene> {
    mkdirSync(SCREENSHOTS, { recursive: true });
    const scene = new ConsoleScene(await TestCluster.start({ counters: 2, gateways: 1, env: SCENE_LEASES }));
    try {
      await scene.populate();
      return scene;
    } catch (err) {
      await scene.stop();
      throw err;
    }
  }

  private async populate(): Promise<void> {
    // The second node is started again later, to be seen joining.
    await this.cluster.counters[1]!.kill();
    await this.cluster.waitBalanced();
    await this.publish("console-a", "likes", 3);
    await this.publish("console-a", "shares", 2);
    await this.publish("console-b", "likes", 1);
    await this.publish("other-x", "likes", 9);
    // More pages under one prefix than the console shows at once (25).
    await Promise.all(
      Array.from({ length: 30 }, (_, i) => this.publish(`bulk-${String(i).padStart(2, "0")}`, "likes", 1)),
    );
    this.viewer = await TestClient.connect(this.cluster.gateways[0]!.wsUrl);
    this.viewer.join("console-a", "someone");
    await this.viewer.waitForViewers("console-a", 1);
    this.browser = await launchChromium();
  }

  /**
   * A publisher's increment, retried while the ring settles (503 is retryable, as the SDK does);
   * exactly once per `key`.
   */
  async publish(page: string, counter: string, by: number, key = `${page}-${counter}`): Promise<void> {
    await eventually(
      async () => {
        const res = await fetch(
          `${this.cluster.gateways[0]!.url}/v1/pages/${encodeURIComponent(page)}/counter`,
          {
            method: "PUT",
            headers: {
              authorization: `Bearer ${CLUSTER_PUBLISHER_KEY}`,
              "content-type": "application/json",
              "idempotency-key": key,
            },
            body: JSON.stringify({ action: "increment", counter, by }),
          },
        );
        expect(res.status).toBe(200);
      },
      { timeoutMs: SETTLE_MS },
    );
  }

  /** The console in a new browser profile whose window is `width` × `height`. */
  async open(width: number, height: number): Promise<Page> {
    const context = await this.browser!.newContext({ viewport: { width, height } });
    const tab = await context.newPage();
    tab.on("pageerror", (err) => this.pageErrors.push(err.message));
    // The console runs under a strict Content-Security-Policy (http_assets.ts): a refusal is a failure.
    tab.on("console", (msg) => {
      if (msg.type() === "error" && /Content Security Policy/.test(msg.text()))
        this.pageErrors.push(msg.text());
    });
    tab.on("websocket", (ws) => ws.on("framereceived", (f) => this.countFrames.push(String(f.payload))));
    // The browser logs a refused sign-in (401) as a failed resource: that one is expected. So is a
    // read the gateway answered 503 `unavailable` (retryable: a partition moving to the node just
    // started, an owner slow on a loaded machine), which the console reads again by itself; each
    // view's polls check what it shows once it has.
    tab.on("console", (m) => {
      if (m.type() === "error" && !/status of (401|503)\b/.test(m.text())) this.pageErrors.push(m.text());
    });
    this.contexts.push(context);
    await tab.goto(`${this.cluster.gateways[0]!.url}/admin`);
    return tab;
  }

  /** Closes the tabs opened since the last call, and forgets their page errors. */
  async closeTabs(): Promise<void> {
    await Promise.all(this.contexts.splice(0).map((c) => c.close()));
    this.pageErrors.splice(0);
  }

  async stop(): Promise<void> {
    await this.viewer?.terminate();
    await this.browser?.close();
    await this.cluster.stop();
  }
}

/** The value of a counter in the page view's table ("" when not shown). */
export async function tableValue(tab: Page, counter: string): Promise<string> {
  for (const row of await tab.locator("#counters-table tbody tr").allInnerTexts())
    if (row.startsWith(`${counter}\t`)) return row.split("\t")[1]!;
  return "";
}

/** Signs in by keyboard: focus the key field, type, Enter. */
export async function signIn(tab: Page, key: string): Promise<void> {
  await tab.getByLabel("Admin key").focus();
  await tab.keyboard.type(key);
  await tab.keyboard.press("Enter");
}

/** "listed" once the pages view lists a page, else what the view says instead (a failed poll shows it). */
export async function listing(tab: Page): Promise<string> {
  if ((await tab.locator("#page-list li").count()) > 0) return "listed";
  const status = await tab.locator("#pages-status").textContent();
  const signInError = await tab.locator("#sign-in-error").textContent();
  return `nothing listed; the pages view says "${status}", the sign-in "${signInError}"`;
}

/** Tabs forward until the focused element has `name`, and returns how many presses it took. */
export async function tabTo(tab: Page, name: string): Promise<number> {
  for (let i = 1; i <= 40; i++) {
    await tab.keyboard.press("Tab");
    const focused = await tab.evaluate(() => document.activeElement?.textContent?.trim() ?? "");
    if (focused === name) return i;
  }
  throw new Error(`could not reach "${name}" with Tab`);
}
