/**
 * Every process checks its settings before it starts anything and names the variable in the error:
 * the log level and the demo switch included, which are read outside the config modules.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { describe, expect, test } from "vitest";

const ROOT = fileURLToPath(new URL("../../..", import.meta.url));

/** Runs a built entry point with `env` (no other LIVECOUNT_*); its exit code and its log lines. */
async function run(entry: string, env: Record<string, string>): Promise<{ code: number; lines: string[] }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LIVECOUNT_")));
  const child = spawn(process.execPath, [`${ROOT}${entry}`], {
    env: { ...base, LIVECOUNT_PORT: "0", LIVECOUNT_HOST: "127.0.0.1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString("utf8")));
  child.stderr.on("data", (d: Buffer) => (out += d.toString("utf8")));
  const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
  const [code] = (await once(child, "exit")) as [number | null];
  clearTimeout(timer);
  return { code: code ?? -1, lines: out.trim().split("\n") };
}

/** The fatal start-up line's error message. */
function fatalMessage(lines: string[]): string | undefined {
  for (const line of lines) {
    try {
      const l = JSON.parse(line) as { level: number; err?: { message: string } };
      if (l.level === 60) return l.err?.message;
    } catch {
      // not a log line
    }
  }
  return undefined;
}

describe("processes - a bad setting stops the start and names its variable", () => {
  test.each([["apps/standalone/dist/main.js"], ["apps/gateway/dist/main.js"], ["apps/counter/dist/main.js"]])(
    "%s with LIVECOUNT_LOG_LEVEL=loud exits 1 and lists the levels",
    async (entry) => {
      const { code, lines } = await run(entry, { LIVECOUNT_LOG_LEVEL: "loud" });
      expect(code).toBe(1);
      expect(fatalMessage(lines)).toBe(
        'LIVECOUNT_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "loud"',
      );
    },
  );

  // Read before the gateway's modules load uWebSockets.js (uws.ts), and again, strictly, by its config.
  test.each([["apps/standalone/dist/main.js"], ["apps/gateway/dist/main.js"]])(
    "%s with LIVECOUNT_MAX_HEADER_BYTES under uWS's own 4 KiB exits 1 and says the least it takes",
    async (entry) => {
      const { code, lines } = await run(entry, { LIVECOUNT_MAX_HEADER_BYTES: "4095" });
      expect(code).toBe(1);
      expect(fatalMessage(lines)).toBe("LIVECOUNT_MAX_HEADER_BYTES must be >= 4096, got 4095");
    },
  );

  test("npm start with uWebSockets.js's own UWS_HTTP_MAX_HEADERS_SIZE set apart from LIVECOUNT_MAX_HEADER_BYTES exits 1 and names both", async () => {
    const { code, lines } = await run("apps/standalone/dist/main.js", { UWS_HTTP_MAX_HEADERS_SIZE: "16384" });
    expect(code).toBe(1);
    expect(fatalMessage(lines)).toBe(
      'UWS_HTTP_MAX_HEADERS_SIZE is "16384", but the gateway sets uWebSockets.js\'s limit from LIVECOUNT_MAX_HEADER_BYTES (8192): set that instead',
    );
  });

  test("npm start with LIVECOUNT_DEMO=maybe exits 1 and says which values the switch takes", async () => {
    const bad = await run("apps/standalone/dist/main.js", { LIVECOUNT_DEMO: "maybe" });
    expect(bad.code).toBe(1);
    expect(fatalMessage(bad.lines)).toMatch(/^LIVECOUNT_DEMO must be 1 or 0 .*got "maybe"$/);
  });
});
