import { describe, expect, test } from "vitest";
import { createLogger, silentLogger } from "../src/logger.js";

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
});
