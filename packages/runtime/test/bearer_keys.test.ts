import { describe, expect, test } from "vitest";
import { BearerKeys, bearerOf } from "../src/bearer_keys.js";

describe("runtime - bearer keys", () => {
  test("runtime - the credential is what follows 'Bearer ' when it is printable ASCII without spaces", () => {
    expect(bearerOf("Bearer s3cr3t-KEY_~!")).toBe("s3cr3t-KEY_~!");
    expect(bearerOf("Bearer a")).toBe("a");
    // The scheme in any case (RFC 7235); the key as it is.
    expect(bearerOf("bearer Key")).toBe("Key");
    expect(bearerOf("BEARER Key")).toBe("Key");
  });

  test("runtime - any other Authorization header has no credential", () => {
    for (const header of [
      undefined,
      "",
      "Bearer",
      "Bearer ",
      "bearerkey",
      "Basic a2V5",
      "Bearer  key",
      "Bearer key ",
      "Bearer two words",
      "xBearer key",
      "Bearer key\n",
      "Bearer k\u00e9y",
      "Bearer k\u007fy",
    ]) {
      expect(bearerOf(header), JSON.stringify(header)).toBeUndefined();
    }
  });

  test("runtime - a presented key is found at its index; anything else, undefined included, is not", () => {
    const keys = new BearerKeys(["first-key", "second-key"]);
    expect(keys.size).toBe(2);
    expect(keys.indexOf("first-key")).toBe(0);
    expect(keys.indexOf("second-key")).toBe(1);
    expect(keys.has("first-key")).toBe(true);
    expect(keys.has("second-key")).toBe(true);
    for (const other of ["first-ke", "first-key ", "FIRST-KEY", "", undefined]) {
      expect(keys.indexOf(other)).toBe(-1);
      expect(keys.has(other)).toBe(false);
    }
  });

  test("runtime - with no keys configured nothing is accepted", () => {
    const keys = new BearerKeys([]);
    expect(keys.size).toBe(0);
    expect(keys.has("")).toBe(false);
    expect(keys.indexOf("anything")).toBe(-1);
  });
});
