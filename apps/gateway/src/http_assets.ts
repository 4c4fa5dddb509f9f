/**
 * What the gateway serves besides the API: the widget bundle and the demo page (from the widget
 * package, once built) and the operators' console (apps/gateway/console, with uPlot for its chart).
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Logger } from "@livecount/runtime";
import type { Asset } from "./http_api.js";

/**
 * The policy of the pages the gateway serves (the demo and the console): their own files and this
 * gateway only, nothing inline, never framed. An injected script could not run, nor reach another
 * site (the console holds the admin key); it also shows the widget needs nothing inline (README,
 * "Embed the widget").
 */
const STRICT_POLICY =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src data:; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const DEMO_HEADERS = {
  "content-security-policy": STRICT_POLICY,
  "x-content-type-options": "nosniff",
} as const;

/** The console's files are also revalidated on every load, and refuse framing in older browsers too. */
const CONSOLE_HEADERS = {
  "x-frame-options": "DENY",
  "content-security-policy": STRICT_POLICY,
  "x-content-type-options": "nosniff",
  "cache-control": "no-cache",
} as const;

/**
 * The console's ES modules: console.js, the entry index.html loads, and those it imports (a module
 * not served here fails to load, and the console with it).
 */
const CONSOLE_MODULES = [
  "console.js",
  "api.js",
  "session.js",
  "view.js",
  "dom.js",
  "pages_view.js",
  "page_view.js",
  "live_chart.js",
  "cluster_view.js",
] as const;

/**
 * Loads the widget bundle and the demo page from the widget package (if it was built), and the
 * operators' console (apps/gateway/console, with uPlot for its chart).
 */
export function loadAssets(logger: Logger): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  // Through the package's exports, not relative to this module: the process may run from a bundle
  // elsewhere (apps/standalone/dist/main.js).
  const consoleFile = (name: string): string => import.meta.resolve(`@livecount/gateway/console/${name}`);
  const files: ReadonlyArray<readonly [string, string, string, Asset["headers"]?]> = [
    [
      "/livecount.js",
      import.meta.resolve("@livecount/widget/livecount.js"),
      "text/javascript; charset=utf-8",
    ],
    ["/", import.meta.resolve("@livecount/widget/demo.html"), "text/html; charset=utf-8", DEMO_HEADERS],
    ["/demo.css", import.meta.resolve("@livecount/widget/demo.css"), "text/css; charset=utf-8", DEMO_HEADERS],
    [
      "/demo.js",
      import.meta.resolve("@livecount/widget/demo.js"),
      "text/javascript; charset=utf-8",
      DEMO_HEADERS,
    ],
    ["/admin", consoleFile("index.html"), "text/html; charset=utf-8", CONSOLE_HEADERS],
    ["/admin/", consoleFile("index.html"), "text/html; charset=utf-8", CONSOLE_HEADERS],
    ...CONSOLE_MODULES.map(
      (name) =>
        [`/admin/${name}`, consoleFile(name), "text/javascript; charset=utf-8", CONSOLE_HEADERS] as const,
    ),
    ["/admin/console.css", consoleFile("console.css"), "text/css; charset=utf-8", CONSOLE_HEADERS],
    [
      "/admin/uplot.js",
      import.meta.resolve("uplot/dist/uPlot.iife.min.js"),
      "text/javascript; charset=utf-8",
      CONSOLE_HEADERS,
    ],
    [
      "/admin/uplot.css",
      import.meta.resolve("uplot/dist/uPlot.min.css"),
      "text/css; charset=utf-8",
      CONSOLE_HEADERS,
    ],
  ];
  for (const [path, url, type, headers] of files) {
    try {
      assets.set(path, { body: readFileSync(fileURLToPath(url)), type, ...(headers ? { headers } : {}) });
    } catch (err) {
      logger.warn({ err, path }, "asset missing; run npm run build");
    }
  }
  return assets;
}
