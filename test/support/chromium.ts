/** Debian's Chromium, driven by playwright-core in the browser tests. */
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";
import { describeWithBinary } from "./binaries.js";

export const CHROMIUM_PATH = "/usr/bin/chromium";
export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
];

/**
 * `describe` for suites that drive Chromium: skipped loudly on a developer machine without it, and
 * failed under CI (describeWithBinary).
 */
/**
 * How long one browser test may take. npm test runs these at nice 19 beside the timed clusters: a
 * slow host starved Chromium and the servers it drives past the suite's 30 s (a test that takes 8 s
 * alone), so they get twice that.
 */
export const BROWSER_TEST_MS = 60_000;

export function describeWithChromium(name: string, fn: () => void): void {
  describeWithBinary(
    existsSync(CHROMIUM_PATH),
    `${CHROMIUM_PATH} is missing (apt-get install -y chromium)`,
    name,
    fn,
    { timeout: BROWSER_TEST_MS },
  );
}

/**
 * Chromium as the tests drive it. Playwright turns the back/forward cache off by default;
 * `backForwardCache` keeps it on, as browsers have it, for tests of a page that is navigated away
 * from and back to.
 */
export function launchChromium(options: { readonly backForwardCache?: boolean } = {}): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM_PATH,
    args: CHROMIUM_ARGS,
    ...(options.backForwardCache === true ? { ignoreDefaultArgs: ["--disable-back-forward-cache"] } : {}),
  });
}
