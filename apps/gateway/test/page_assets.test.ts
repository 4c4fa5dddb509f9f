/**
 * The pages' files as a real gateway serves them.
 *
 * - The operators' console: index.html loads one ES module, which imports the others. A module the
 *   gateway does not serve fails to load and takes the whole console with it, and a file served
 *   without the console's headers could be framed by another site; the browser test
 *   (test/browser/console.test.ts) drives the console itself.
 * - The demo page: its script and styles are files of their own, served under the page's strict
 *   Content-Security-Policy; the widget's browser test drives the page under it.
 */
import { readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { TestPlatform } from "../../../test/support/platform.js";

const CONSOLE_DIR = fileURLToPath(new URL("../console/", import.meta.url));
/** The policy of the demo and the console (http_assets.ts STRICT_POLICY). */
const STRICT_POLICY =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src data:; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/** What every file of the console carries (http_assets.ts CONSOLE_HEADERS). */
const CONSOLE_HEADERS = {
  "x-frame-options": "DENY",
  "content-security-policy": STRICT_POLICY,
  "x-content-type-options": "nosniff",
  "cache-control": "no-cache",
};
/** What the demo page and its files carry (http_assets.ts DEMO_HEADERS). */
const DEMO_HEADERS = { "content-security-policy": STRICT_POLICY, "x-content-type-options": "nosniff" };

describe("page assets", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start();
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("page assets - index.html's module and every module it imports are served as JavaScript with the console's headers", async () => {
    const page = await fetch(`${platform.url}/admin`);
    expect(page.status).toBe(200);
    const entries = [...(await page.text()).matchAll(/<script type="module" src="([^"]+)"/g)].map(
      (m) => m[1]!,
    );
    expect(entries).toEqual(["/admin/console.js"]);
    const seen = new Set<string>();
    const queue = [...entries];
    for (let path = queue.shift(); path !== undefined; path = queue.shift()) {
      if (seen.has(path)) continue;
      seen.add(path);
      const res = await fetch(`${platform.url}${path}`);
      expect(res.status, path).toBe(200);
      expect(res.headers.get("content-type"), path).toBe("text/javascript; charset=utf-8");
      for (const [name, value] of Object.entries(CONSOLE_HEADERS))
        expect(res.headers.get(name), `${path} ${name}`).toBe(value);
      for (const [, specifier] of (await res.text()).matchAll(/^import\b[^;]*?\bfrom "([^"]+)";/gm))
        queue.push(new URL(specifier!, `http://console${path}`).pathname);
    }
    // Every module in apps/gateway/console is reached from the entry: none is left unserved or unused.
    const modules = readdirSync(CONSOLE_DIR).filter((name) => name.endsWith(".js"));
    expect([...seen].sort()).toEqual(modules.map((name) => `/admin/${name}`).sort());
  });

  test("page assets - the demo page loads its script and styles from files, each served with the page's strict policy", async () => {
    const page = await fetch(`${platform.url}/`);
    expect(page.status).toBe(200);
    const html = await page.text();
    for (const [name, value] of Object.entries(DEMO_HEADERS))
      expect(page.headers.get(name), name).toBe(value);
    // Nothing inline that the policy would refuse.
    expect(html).not.toMatch(/<style|<script>|\son[a-z]+=|\sstyle=/);
    const files = [
      ...[...html.matchAll(/<script src="([^"]+)"/g)].map((m) => [m[1]!, "text/javascript; charset=utf-8"]),
      ...[...html.matchAll(/<link rel="stylesheet" href="([^"]+)"/g)].map((m) => [
        m[1]!,
        "text/css; charset=utf-8",
      ]),
    ];
    expect(files.map(([path]) => path)).toEqual(["/livecount.js", "/demo.js", "/demo.css"]);
    for (const [path, type] of files) {
      const res = await fetch(`${platform.url}${path}`);
      expect(res.status, path).toBe(200);
      expect(res.headers.get("content-type"), path).toBe(type);
      if (path !== "/livecount.js")
        for (const [name, value] of Object.entries(DEMO_HEADERS))
          expect(res.headers.get(name), `${path} ${name}`).toBe(value);
    }
  });
});
