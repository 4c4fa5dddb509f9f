/**
 * The widget's world for widget.test.ts: a real standalone gateway, the customer's site on another
 * origin that embeds its widget with one script tag, and Chromium profiles visiting it, each page
 * recording its sockets, what they received and every `livecount` event it showed.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { startStandalone, type Standalone } from "@livecount/standalone";
import type { LiveCountDetail, LiveCountEvent } from "@livecount/widget";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { expect } from "vitest";
import { launchChromium } from "../support/chromium.js";
import { LinkProxy } from "../support/link_proxy.js";

export const PUBLISHER_KEY = "test-key";
/** Private pages of this suite's gateway, and the secret their join tokens are signed with. */
export const PRIVATE_PREFIX = "private-";
export const JOIN_SECRET = "widget-test-join-secret-0123456789";
/**
 * Longer than the widget's first reconnect delay (full jitter under BACKOFF_BASE_MS, 500 ms) with
 * room for the handshake on a loaded machine: the reconnect test checks that a viewer who comes back
 * within the grace window never dips. At 500 ms it dipped whenever the delay drew near 500; npm test
 * runs Chromium at nice 19 beside the timed clusters, where a stall can last a second or two.
 */
const GRACE_MS = 4_000;
/** How long a visible change may take: grace + coalescing + a loaded machine. Polled, not slept. */
export const SETTLE_MS = 15_000;

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

/** The gateway, the host site embedding its widget, and the browser the tests visit them with. */
export class WidgetSite {
  /** Errors thrown into a page and Content-Security-Policy refusals, each one a failure. */
  readonly pageErrors: string[] = [];
  /** What pages wrote to the console as warnings (the widget's `livecount:` lines among them). */
  readonly warnings: string[] = [];
  private readonly contexts: BrowserContext[] = [];

  private constructor(
    readonly gateway: Standalone,
    readonly gatewayOrigin: string,
    private readonly host: Server,
    readonly hostOrigin: string,
    private readonly browser: Browser,
    /** The proxy in front of the gateway, when started with `proxy`: gatewayOrigin is its origin. */
    readonly proxy?: LinkProxy,
  ) {}

  /**
   * `backForwardCache`: see launchChromium. `proxy`: the browser and the tests reach the gateway
   * through a TCP proxy (test/support/link_proxy.ts) that can stall their connections.
   */
  static async start(
    options: { readonly backForwardCache?: boolean; readonly proxy?: boolean } = {},
  ): Promise<WidgetSite> {
    const gateway = await startStandalone({
      env: {
        LIVECOUNT_PORT: "0",
        LIVECOUNT_PUBLISHER_KEYS: PUBLISHER_KEY,
        LIVECOUNT_GRACE_MS: String(GRACE_MS),
        LIVECOUNT_PRIVATE_PREFIXES: PRIVATE_PREFIX,
        LIVECOUNT_JOIN_SECRET: JOIN_SECRET,
      },
    });
    let host: Server | undefined;
    let proxy: LinkProxy | undefined;
    try {
      if (options.proxy === true) proxy = await LinkProxy.start({ targetPort: gateway.port });
      const gatewayOrigin = `http://localhost:${proxy?.port ?? gateway.port}`;
      host = await startHost(gatewayOrigin);
      const hostOrigin = `http://127.0.0.1:${(host.address() as AddressInfo).port}`;
      const browser = await launchChromium({ backForwardCache: options.backForwardCache === true });
      return new WidgetSite(gateway, gatewayOrigin, host, hostOrigin, browser, proxy);
    } catch (err) {
      if (host) await closeServer(host);
      await proxy?.close();
      await gateway.close();
      throw err;
    }
  }

  /** A new browser profile: its own localStorage, so its own viewer id. */
  async newBrowser(): Promise<BrowserContext> {
    const context = await this.browser.newContext({ locale: "en-US" });
    this.contexts.push(context);
    // The host page and the demo page run under a strict Content-Security-Policy: anything the
    // widget or the demo did inline would be refused, and is a failure here.
    context.on("console", (msg) => {
      if (msg.type() === "error" && /Content Security Policy/.test(msg.text()))
        this.pageErrors.push(msg.text());
      if (msg.type() === "warning") this.warnings.push(msg.text());
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
  async open(context: BrowserContext, page: string, params: Record<string, string> = {}): Promise<Page> {
    const tab = await context.newPage();
    tab.on("pageerror", (err) => this.pageErrors.push(`${page}: ${err.message}`));
    await tab.goto(`${this.hostOrigin}/?${new URLSearchParams({ page, ...params })}`);
    return tab;
  }

  /**
   * The gateway's own origin, for the tests' HTTP calls: never through the proxy, where a pooled
   * keep-alive connection could be one it stalled.
   */
  get apiOrigin(): string {
    return `http://localhost:${this.gateway.port}`;
  }

  async viewersOverHttp(page: string): Promise<number> {
    const res = await fetch(`${this.apiOrigin}/v1/pages/${encodeURIComponent(page)}/counter`, {
      headers: { authorization: `Bearer ${PUBLISHER_KEY}` },
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { viewers: number }).viewers;
  }

  /** A publisher's like of `page`, counted once per `key` (its Idempotency-Key). */
  async like(page: string, key: string): Promise<void> {
    const res = await fetch(`${this.apiOrigin}/v1/pages/${encodeURIComponent(page)}/counter`, {
      method: "PUT",
      headers: { authorization: `Bearer ${PUBLISHER_KEY}`, "idempotency-key": key },
      body: JSON.stringify({ action: "increment", counter: "likes", by: 1 }),
    });
    expect(res.status).toBe(200);
  }

  /** Closes every browser profile opened since the last call. */
  async closeBrowsers(): Promise<void> {
    await Promise.all(this.contexts.splice(0).map((c) => c.close()));
  }

  async close(): Promise<void> {
    await this.browser.close();
    await closeServer(this.host);
    await this.proxy?.close();
    await this.gateway.close();
  }
}

/** Waits until the element's text is `want`; on timeout, says what it showed instead. */
export async function waitForText(tab: Page, selector: string, want: string): Promise<void> {
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
export function distinct(values: readonly number[]): number[] {
  return values.filter((v, i) => i === 0 || v !== values[i - 1]);
}

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

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
