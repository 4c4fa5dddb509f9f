import { describe, expect, it } from "vitest";
import { HLL_REGISTERS } from "@livecount/crdt";
import {
  PRESENCE_COUNTERS,
  isSeriesCounter,
  peakHourOf,
  peakMinuteOf,
  uniqueRegisterOf,
  uniqueRegisterParts,
  windowBucketOf,
  windowCounterOf,
} from "../src/index.js";

describe("series names", () => {
  it("series - reads back the day and register of a unique-visitor entry", () => {
    expect(uniqueRegisterParts(uniqueRegisterOf(20_420, 0))).toEqual({ day: 20_420, register: 0 });
    expect(uniqueRegisterParts(uniqueRegisterOf(0, HLL_REGISTERS - 1))).toEqual({
      day: 0,
      register: HLL_REGISTERS - 1,
    });
    expect(uniqueRegisterParts(`@u:${"9".repeat(15)}:7`)).toEqual({ day: 999_999_999_999_999, register: 7 });
  });

  it("series - refuses unique-visitor names that are not canonical", () => {
    for (const name of [
      "@u:",
      "@u::1",
      "@u:1:",
      "@u:1",
      "@u:01:1",
      "@u:1:01",
      "@u:1:2:3",
      `@u:1:${HLL_REGISTERS}`,
      `@u:${"1".repeat(16)}:1`,
      "@u:1:-1",
      "@u:1:1a",
      "@u:a:1",
      "@u:1.5:1",
      "@U:1:1",
      "u:1:1",
    ]) {
      expect(uniqueRegisterParts(name), name).toBeUndefined();
      expect(isSeriesCounter(name), name).toBe(false);
    }
  });

  it("series - knows every kind of time bucket and nothing else", () => {
    for (const name of [
      uniqueRegisterOf(20_420, 17),
      peakMinuteOf(29_405_000),
      peakHourOf(490_000),
      windowCounterOf("likes", 29_405_000),
    ])
      expect(isSeriesCounter(name), name).toBe(true);
    for (const name of [
      "likes",
      "@likes",
      ...PRESENCE_COUNTERS,
      "@del:likes",
      "@pm:",
      "@pm:012",
      "@ph:1x",
      `@ph:${"1".repeat(16)}`,
      "@w:likes:",
      "@w:likes:01",
      "@w::5",
      "",
    ])
      expect(isSeriesCounter(name), name).toBe(false);
    expect(isSeriesCounter(42)).toBe(false);
    expect(isSeriesCounter(undefined)).toBe(false);
  });

  it("series - reads back the counter and minute of a window bucket", () => {
    expect(windowBucketOf(windowCounterOf("likes", 29_405_000))).toEqual({
      counter: "likes",
      minute: 29_405_000,
    });
    expect(windowBucketOf(windowCounterOf("a:b", 0))).toEqual({ counter: "a:b", minute: 0 });
    expect(windowBucketOf("likes")).toBeUndefined();
  });
});
