/** Debian's Chromium, driven by playwright-core in the browser tests. */
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";

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
 * Whether browser tests must be skipped: only on a developer machine without Chromium; under CI a
 * missing browser is a failure, so the tests run and fail.
 */
export function chromiumSkipped(suite: string): boolean {
  const skip = !existsSync(CHROMIUM_PATH) && !process.env.CI;
  if (skip)
    console.warn(
      `${suite} SKIPPED: ${CHROMIUM_PATH} is missing (apt-get install -y chromium). Under CI it fails instead.`,
    );
  return skip;
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM_PATH, args: CHROMIUM_ARGS });
}
