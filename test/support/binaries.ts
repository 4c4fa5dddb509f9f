/** Finding the server binaries tests start (nats-server, redis-server), and skipping without them. */
import { accessSync, constants as fsConstants } from "node:fs";
import { delimiter, join } from "node:path";
import { describe } from "vitest";

function isExecutable(path: string): boolean {
  try {
    accessSync(path, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** `$envVar` when set, else `name` on PATH, else `fallback`; undefined when none is executable. */
export function findBinary(name: string, envVar: string, fallback: string): string | undefined {
  const fromEnv = process.env[envVar];
  if (fromEnv !== undefined && fromEnv !== "") return isExecutable(fromEnv) ? fromEnv : undefined;
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir === "") continue;
    const candidate = join(dir, name);
    if (isExecutable(candidate)) return candidate;
  }
  return isExecutable(fallback) ? fallback : undefined;
}

export function underCi(): boolean {
  return process.env.CI !== undefined && process.env.CI !== "";
}

/**
 * `describe` for suites that need a binary. Without it the suite is skipped loudly, and under CI it
 * fails instead, so a misconfigured pipeline cannot pass by skipping.
 */
export function describeWithBinary(
  available: boolean,
  missing: string,
  name: string,
  fn: () => void,
  options: { readonly timeout?: number } = {},
): void {
  if (available) {
    describe(name, options, fn);
    return;
  }
  const message = `${missing}: "${name}"`;
  if (underCi()) throw new Error(message);
  console.warn(`\n!!! SKIPPED: ${message}\n`);
  describe.skip(name, fn);
}
