import { execFileSync } from "node:child_process";
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
});
