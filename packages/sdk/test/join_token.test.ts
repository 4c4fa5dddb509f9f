/**
 * signJoinToken mints what the gateway verifies: an HS256 JWT with `page` or `prefix`, `sub` and
 * `exp`, checked here with jose, the library the gateway verifies with.
 */
import { decodeProtectedHeader, jwtVerify } from "jose";
import { describe, expect, test } from "vitest";
import { signJoinToken } from "../src/index.js";

const SECRET = "sdk-join-token-secret-0123456789ab";
const key = new TextEncoder().encode(SECRET);

describe("sdk - join tokens", () => {
  test("join token - an HS256 JWT with page or prefix, sub and exp that jose verifies", async () => {
    const now = Date.now();
    const token = await signJoinToken({
      secret: SECRET,
      viewer: "alice",
      page: "user-7",
      expiresInS: 600,
      now,
    });
    expect(decodeProtectedHeader(token)).toEqual({ alg: "HS256", typ: "JWT" });
    const { payload } = await jwtVerify(token, key, { algorithms: ["HS256"] });
    expect(payload).toEqual({
      page: "user-7",
      sub: "alice",
      iat: Math.floor(now / 1000),
      exp: Math.floor(now / 1000) + 600,
    });
    const prefixed = await signJoinToken({ secret: SECRET, viewer: "bob", prefix: "team-" });
    expect((await jwtVerify(prefixed, key)).payload).toMatchObject({ prefix: "team-", sub: "bob" });
    await expect(jwtVerify(token, new TextEncoder().encode(`${SECRET}x`))).rejects.toThrow();
  });

  test("join token - refuses a short secret, a bad viewer, both or neither of page and prefix, a bad expiry", async () => {
    await expect(signJoinToken({ secret: "short", viewer: "a", page: "p" })).rejects.toThrow(RangeError);
    await expect(signJoinToken({ secret: SECRET, viewer: "a b", page: "p" })).rejects.toThrow(/viewer/);
    await expect(signJoinToken({ secret: SECRET, viewer: "a" })).rejects.toThrow(TypeError);
    await expect(signJoinToken({ secret: SECRET, viewer: "a", page: "p", prefix: "p" })).rejects.toThrow(
      TypeError,
    );
    await expect(signJoinToken({ secret: SECRET, viewer: "a", page: "p", expiresInS: 0 })).rejects.toThrow(
      RangeError,
    );
  });
});
