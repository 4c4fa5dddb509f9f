import { execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { Writable } from "node:stream";
import { pino } from "pino";
import { describe, expect, test } from "vitest";
import { createLogger, silentLogger } from "../src/logger.js";

const ROOT = fileURLToPath(new URL("../../..", import.meta.url));

describe("runtime - logger", () => {
  test("runtime - a process logger logs at info unless told otherwise, under its name", () => {
    const logger = createLogger({ name: "counter" });
    expect(logger.level).toBe("info");
    expect(logger.isLevelEnabled("debug")).toBe(false);
    expect(createLogger({ name: "counter", level: "debug" }).level).toBe("debug");
  });

  test("runtime - the silent logger drops every level", () => {
    expect(silentLogger.level).toBe("silent");
    expect(silentLogger.isLevelEnabled("fatal")).toBe(false);
  });

  test("runtime - npm run logs:pretty turns the JSON lines of a process into readable ones, stack traces included", () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString("utf8"));
        done();
      },
    });
    // What createLogger writes: pino's JSON lines (the stream is the only difference).
    pino({ name: "gateway" }, sink).warn(
      { err: new Error("store stalled"), page: "home" },
      "snapshot failed; retrying",
    );
    const pretty = execFileSync("npm", ["run", "-s", "logs:pretty"], {
      cwd: ROOT,
      input: lines.join(""),
    }).toString("utf8");
    expect(pretty).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] WARN \(gateway\): snapshot failed; retrying$/m);
    expect(pretty).toMatch(/^ {4}page: "home"$/m);
    expect(pretty).toContain("Error: store stalled");
    expect(pretty).not.toContain("hostname");
  });

  test("runtime - a process stopped after its log reader went away exits, and one whose reader stays gets every line", async () => {
    // A process like ours: logs, and on SIGTERM logs a burst while stopping (the counter node's
    // "partition dropped" lines), then exits through stopOnSignals.
    const script = `
      import { createLogger, stopOnSignals } from "${ROOT}packages/runtime/dist/index.js";
      const logger = createLogger({ name: "exit-test" });
      stopOnSignals(logger, async () => {
        for (let i = 0; i < 2000; i++) logger.info({ i, pad: "x".repeat(200) }, "stopping");
        logger.info("stopped");
      });
      logger.info("started");
      setInterval(() => {}, 1000);
    `;
    const start = (): ReturnType<typeof spawn> =>
      spawn(process.execPath, ["--input-type=module", "-e", script], {
        stdio: ["ignore", "pipe", "inherit"],
      });

    // The reader goes away after the first line: the process must still exit on SIGTERM.
    const orphaned = start();
    await once(orphaned.stdout!, "data");
    orphaned.stdout!.destroy();
    orphaned.kill("SIGTERM");
    const exited = await Promise.race([
      once(orphaned, "exit").then(([code]) => code as number),
      new Promise<string>((resolve) => setTimeout(() => resolve("still running"), 10_000)),
    ]);
    if (exited === "still running") orphaned.kill("SIGKILL");
    expect(exited).toBe(0);

    // A reader that stays: every line of the stop arrives before the exit.
    const kept = start();
    let out = "";
    kept.stdout!.on("data", (d: Buffer) => {
      out += d.toString("utf8");
      if (out.includes('"started"') && kept.signalCode === null && !out.includes("stopping"))
        kept.kill("SIGTERM");
    });
    const [code] = await once(kept, "exit");
    expect(code).toBe(0);
    const lines = out
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { msg: string });
    expect(lines.filter((l) => l.msg === "stopping")).toHaveLength(2000);
    expect(lines.at(-1)!.msg).toBe("stopped");
  }, 30_000);
});
