import { describe, expect, test } from "vitest";
import {
  ConfigError,
  readChoice,
  readFlag,
  readInt,
  readList,
  readOptionalString,
  readString,
  readToken,
} from "../src/config.js";

/** The ConfigError `read` throws (fails the test when it throws nothing or something else). */
function configErrorOf(read: () => unknown): ConfigError {
  try {
    read();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error("expected a ConfigError");
}

describe("runtime - config", () => {
  test("runtime - a string variable is trimmed; unset, empty or blank falls back", () => {
    expect(readString({ NAME: "  value \t" }, "NAME", "fallback")).toBe("value");
    expect(readString({}, "NAME", "fallback")).toBe("fallback");
    expect(readString({ NAME: "" }, "NAME", "fallback")).toBe("fallback");
    expect(readString({ NAME: " \t " }, "NAME", "fallback")).toBe("fallback");
    expect(readOptionalString({ NAME: " value " }, "NAME")).toBe("value");
    expect(readOptionalString({ NAME: "  " }, "NAME")).toBeUndefined();
    expect(readOptionalString({}, "NAME")).toBeUndefined();
  });

  test("runtime - an integer variable reads signed decimal integers and falls back when unset", () => {
    expect(readInt({ N: " 42 " }, "N", 7)).toBe(42);
    expect(readInt({ N: "-3" }, "N", 7)).toBe(-3);
    expect(readInt({ N: "0" }, "N", 7)).toBe(0);
    expect(readInt({}, "N", 7)).toBe(7);
    expect(readInt({ N: " " }, "N", 7)).toBe(7);
  });

  test("runtime - an integer variable that is not an integer names the variable and the value", () => {
    for (const bad of ["1.5", "abc", "12abc", "abc12", "1e3", "0x10", "+5", "--1", "1 2"]) {
      expect(configErrorOf(() => readInt({ N: bad }, "N", 7)).message).toBe(
        `N must be an integer, got "${bad}"`,
      );
    }
  });

  test("runtime - an integer variable's range is inclusive at both ends", () => {
    const range = { min: 10, max: 20 };
    expect(readInt({ N: "10" }, "N", 15, range)).toBe(10);
    expect(readInt({ N: "20" }, "N", 15, range)).toBe(20);
    expect(configErrorOf(() => readInt({ N: "9" }, "N", 15, range)).message).toBe("N must be >= 10, got 9");
    expect(configErrorOf(() => readInt({ N: "21" }, "N", 15, range)).message).toBe("N must be <= 20, got 21");
    // One bound alone limits only its own side.
    expect(readInt({ N: "-1000" }, "N", 0, { max: 20 })).toBe(-1000);
    expect(readInt({ N: "1000" }, "N", 0, { min: 10 })).toBe(1000);
  });

  test("runtime - a list variable splits on commas, trims items and drops empty ones", () => {
    expect(readList({ L: " a, b ,,c , " }, "L")).toEqual(["a", "b", "c"]);
    expect(readList({ L: "only" }, "L")).toEqual(["only"]);
    expect(readList({ L: " , ," }, "L")).toEqual([]);
    expect(readList({ L: "" }, "L")).toEqual([]);
    expect(readList({}, "L")).toEqual([]);
  });

  test("runtime - a token variable takes 1..64 of [A-Za-z0-9_-], the fallback included", () => {
    expect(readToken({ DC: " eu-west_1 " }, "DC", "dc1")).toBe("eu-west_1");
    expect(readToken({}, "DC", "dc1")).toBe("dc1");
    expect(readToken({ DC: "x".repeat(64) }, "DC", "dc1")).toBe("x".repeat(64));
    for (const bad of ["x".repeat(65), "a.b", "a b", "dc*", "dé"]) {
      expect(configErrorOf(() => readToken({ DC: bad }, "DC", "dc1")).message).toBe(
        `DC must be 1..64 of [A-Za-z0-9_-], got "${bad}"`,
      );
    }
    expect(configErrorOf(() => readToken({}, "DC", "bad.fallback")).message).toContain("bad.fallback");
  });

  test("runtime - a switch takes 1/0, true/false, yes/no, on/off in any case, and nothing else", () => {
    for (const on of ["1", "true", "TRUE", " yes ", "On"]) expect(readFlag({ F: on }, "F", false)).toBe(true);
    for (const off of ["0", "false", "No", "OFF"]) expect(readFlag({ F: off }, "F", true)).toBe(false);
    expect(readFlag({}, "F", true)).toBe(true);
    expect(readFlag({ F: " " }, "F", false)).toBe(false);
    for (const bad of ["2", "maybe", "enabled", "-1"]) {
      expect(configErrorOf(() => readFlag({ F: bad }, "F", true)).message).toBe(
        `F must be 1 or 0 (true/false, yes/no, on/off), got "${bad}"`,
      );
    }
  });

  test("runtime - a choice takes one of its values exactly, and names them all when it is not", () => {
    const levels = ["warn", "info"] as const;
    expect(readChoice({ L: " warn " }, "L", "info", levels)).toBe("warn");
    expect(readChoice({}, "L", "info", levels)).toBe("info");
    for (const bad of ["WARN", "verbose", "in"]) {
      expect(configErrorOf(() => readChoice({ L: bad }, "L", "info", levels)).message).toBe(
        `L must be one of warn, info, got "${bad}"`,
      );
    }
  });

  test("runtime - a configuration error is a named Error", () => {
    const err = configErrorOf(() => readInt({ N: "x" }, "N", 0));
    expect(err).toBeInstanceOf(Error);
    expect(err.name).toBe("ConfigError");
  });
});
