/** Credentials in NATS addresses: taken out for nats.js, and masked wherever an address is shown. */
import { describe, expect, test } from "vitest";
import { maskedServers, withoutCredentials } from "../src/nats_servers.js";

describe("bus - NATS addresses with credentials", () => {
  test("bus - user and password, a token, a password holding '@' or escapes, and no scheme", () => {
    expect(withoutCredentials("nats://lc:s3cret@h1:4222")).toEqual({
      servers: ["nats://h1:4222"],
      credentials: { user: "lc", pass: "s3cret" },
    });
    expect(withoutCredentials(["nats://h0:4222", "nats://t0ken@h1:4222", "u:p@h2:4222"])).toEqual({
      servers: ["nats://h0:4222", "nats://h1:4222", "h2:4222"],
      credentials: { token: "t0ken" },
    });
    expect(withoutCredentials("nats://u:p@ss%2Fw@h:4222").credentials).toEqual({ user: "u", pass: "p@ss/w" });
    expect(withoutCredentials("tls://h:4222/path@x")).toEqual({
      servers: ["tls://h:4222/path@x"],
      credentials: {},
    });
  });

  test("bus - shown addresses never carry the credentials", () => {
    expect(
      maskedServers(["nats://u:p@ss@h1:4222", "u:s3cret@h2:4222", "nats://t0ken@h3", "nats://h4:4222"]),
    ).toBe("nats://***@h1:4222,***@h2:4222,nats://***@h3,nats://h4:4222");
  });
});
