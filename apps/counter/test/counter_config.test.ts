import { ConfigError } from "@livecount/runtime";
import { describe, expect, test } from "vitest";
import { DEFAULT_VISITOR_KEY, readCounterConfig } from "../src/counter_config.js";

describe("counter - config", () => {
  test("counter - LIVECOUNT_VISITOR_KEY: the development key by default, a secret of 16 characters or more", () => {
    expect(readCounterConfig({}).visitorKey).toBe(DEFAULT_VISITOR_KEY);
    expect(readCounterConfig({ LIVECOUNT_VISITOR_KEY: "" }).visitorKey).toBe(DEFAULT_VISITOR_KEY);
    expect(readCounterConfig({ LIVECOUNT_VISITOR_KEY: "k".repeat(16) }).visitorKey).toBe("k".repeat(16));
    expect(() => readCounterConfig({ LIVECOUNT_VISITOR_KEY: "k".repeat(15) })).toThrow(ConfigError);
  });
});
