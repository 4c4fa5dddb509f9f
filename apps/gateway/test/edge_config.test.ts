/**
 * The public-edge settings are validated at start-up, each error naming its variable, and client
 * addresses resolve the same way whatever form uWS or a proxy writes them in.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError } from "@livecount/runtime";
import { describe, expect, test } from "vitest";
import { ClientAddresses, limitKeyOf } from "../src/client_address.js";
import { readGatewayConfig } from "../src/gateway_config.js";

const SECRET = "a-join-secret-of-at-least-32-bytes!";

function configError(env: Record<string, string>): string {
  try {
    readGatewayConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error(`no ConfigError for ${JSON.stringify(env)}`);
}

describe("gateway - edge settings", () => {
  test("config - defaults: any origin, 500 sockets and 4096 pages per address, 20/1000 new pages and new visitors, 18000 sockets in all, 100/200 reads, no TLS", () => {
    const c = readGatewayConfig({});
    expect(c).toMatchObject({
      allowedOrigins: undefined,
      maxConnectionsPerIp: 500,
      maxConnections: 18000,
      maxPagesPerIp: 4096,
      newPageRatePerS: 20,
      newPageBurst: 1000,
      newVisitorRatePerS: 20,
      newVisitorBurst: 1000,
      trustedProxies: [],
      readRatePerS: 100,
      readBurst: 200,
      httpRatePerS: 100,
      httpBurst: 200,
      readRateMaxAddresses: 10000,
      joinSecret: undefined,
      privatePrefixes: [],
      tls: undefined,
      adminKey: undefined,
    });
  });

  test("config - each bad edge setting is a ConfigError naming its variable", () => {
    const cases: ReadonlyArray<[Record<string, string>, string]> = [
      [{ LIVECOUNT_ALLOWED_ORIGINS: "https://a.example/path" }, "LIVECOUNT_ALLOWED_ORIGINS"],
      [{ LIVECOUNT_ALLOWED_ORIGINS: "news.example" }, "LIVECOUNT_ALLOWED_ORIGINS"],
      [{ LIVECOUNT_ALLOWED_ORIGINS: "ftp://a.example" }, "LIVECOUNT_ALLOWED_ORIGINS"],
      [{ LIVECOUNT_MAX_CONNECTIONS_PER_IP: "0" }, "LIVECOUNT_MAX_CONNECTIONS_PER_IP"],
      [{ LIVECOUNT_MAX_CONNECTIONS: "many" }, "LIVECOUNT_MAX_CONNECTIONS"],
      [{ LIVECOUNT_MAX_PAGES_PER_IP: "0" }, "LIVECOUNT_MAX_PAGES_PER_IP"],
      [{ LIVECOUNT_NEW_PAGE_RATE: "0" }, "LIVECOUNT_NEW_PAGE_RATE"],
      [{ LIVECOUNT_NEW_PAGE_BURST: "1.5" }, "LIVECOUNT_NEW_PAGE_BURST"],
      [{ LIVECOUNT_NEW_VISITOR_RATE: "0" }, "LIVECOUNT_NEW_VISITOR_RATE"],
      [{ LIVECOUNT_NEW_VISITOR_BURST: "many" }, "LIVECOUNT_NEW_VISITOR_BURST"],
      [{ LIVECOUNT_TRUSTED_PROXIES: "10.0.0.0/33" }, "LIVECOUNT_TRUSTED_PROXIES"],
      [{ LIVECOUNT_TRUSTED_PROXIES: "proxy.internal" }, "LIVECOUNT_TRUSTED_PROXIES"],
      [{ LIVECOUNT_READ_RATE: "0" }, "LIVECOUNT_READ_RATE"],
      [{ LIVECOUNT_HTTP_RATE: "0" }, "LIVECOUNT_HTTP_RATE"],
      [{ LIVECOUNT_HTTP_BURST: "x" }, "LIVECOUNT_HTTP_BURST"],
      [{ LIVECOUNT_READ_BURST: "-1" }, "LIVECOUNT_READ_BURST"],
      [{ LIVECOUNT_READ_RATE_MAX_ADDRESSES: "0" }, "LIVECOUNT_READ_RATE_MAX_ADDRESSES"],
      [{ LIVECOUNT_JOIN_SECRET: "short" }, "LIVECOUNT_JOIN_SECRET"],
      [{ LIVECOUNT_PRIVATE_PREFIXES: "user-" }, "LIVECOUNT_PRIVATE_PREFIXES"],
      [{ LIVECOUNT_PRIVATE_PREFIXES: "a b", LIVECOUNT_JOIN_SECRET: SECRET }, "LIVECOUNT_PRIVATE_PREFIXES"],
      [{ LIVECOUNT_TLS_CERT_FILE: "/nonexistent/cert.pem" }, "LIVECOUNT_TLS_KEY_FILE"],
      [
        { LIVECOUNT_TLS_CERT_FILE: "/nonexistent/cert.pem", LIVECOUNT_TLS_KEY_FILE: "/nonexistent/key.pem" },
        "LIVECOUNT_TLS_CERT_FILE",
      ],
      [{ LIVECOUNT_ADMIN_KEY: "too-short" }, "LIVECOUNT_ADMIN_KEY"],
    ];
    for (const [env, variable] of cases) expect(configError(env), JSON.stringify(env)).toContain(variable);
  });

  test("config - event streams get a heartbeat every 15 s by default; LIVECOUNT_SSE_HEARTBEAT_S takes 1..300", () => {
    expect(readGatewayConfig({}).sseHeartbeatS).toBe(15);
    expect(readGatewayConfig({ LIVECOUNT_SSE_HEARTBEAT_S: "1" }).sseHeartbeatS).toBe(1);
    expect(readGatewayConfig({ LIVECOUNT_SSE_HEARTBEAT_S: "300" }).sseHeartbeatS).toBe(300);
    for (const bad of ["0", "301", "1.5", "soon"])
      expect(configError({ LIVECOUNT_SSE_HEARTBEAT_S: bad })).toMatch(/LIVECOUNT_SSE_HEARTBEAT_S/);
  });

  test("config - LIVECOUNT_JOIN_SECRET: none by default, at least 32 bytes (counted in UTF-8)", () => {
    expect(readGatewayConfig({}).joinSecret).toBeUndefined();
    expect(readGatewayConfig({ LIVECOUNT_JOIN_SECRET: "s".repeat(32) }).joinSecret).toBe("s".repeat(32));
    // 16 two-byte characters are 32 bytes.
    expect(readGatewayConfig({ LIVECOUNT_JOIN_SECRET: "é".repeat(16) }).joinSecret).toBe("é".repeat(16));
    for (const bad of ["s".repeat(31), "é".repeat(15) + "s"])
      expect(configError({ LIVECOUNT_JOIN_SECRET: bad })).toBe(
        "LIVECOUNT_JOIN_SECRET must be at least 32 bytes",
      );
  });

  test("config - origins are kept as browsers send them; TLS files must be readable", () => {
    const dir = mkdtempSync(join(tmpdir(), "lc-edge-"));
    try {
      const cert = join(dir, "cert.pem");
      const key = join(dir, "key.pem");
      writeFileSync(cert, "x");
      writeFileSync(key, "x");
      const c = readGatewayConfig({
        LIVECOUNT_ALLOWED_ORIGINS: "https://News.Example/, http://localhost:8080",
        LIVECOUNT_TLS_CERT_FILE: cert,
        LIVECOUNT_TLS_KEY_FILE: key,
        LIVECOUNT_PRIVATE_PREFIXES: "user-,team-",
        LIVECOUNT_JOIN_SECRET: SECRET,
      });
      expect(c.allowedOrigins).toEqual(["https://news.example", "http://localhost:8080"]);
      expect(c.tls).toEqual({ certFile: cert, keyFile: key });
      expect(c.privatePrefixes).toEqual(["user-", "team-"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("addresses - the rightmost untrusted X-Forwarded-For hop, only from trusted proxies, in canonical form", () => {
    const a = new ClientAddresses(["127.0.0.1", "10.0.0.0/8", "fd00::/8"]);
    // uWS writes IPv6 in full; IPv4 clients of a dual-stack listener come IPv4-mapped.
    expect(a.resolve("0000:0000:0000:0000:0000:ffff:cb00:7107", "")).toBe("203.0.113.7");
    expect(a.resolve("0000:0000:0000:0000:0000:0000:0000:0001", "203.0.113.7")).toBe("::1");
    expect(a.resolve("198.51.100.1", "203.0.113.7")).toBe("198.51.100.1");
    expect(a.resolve("127.0.0.1", "203.0.113.7")).toBe("203.0.113.7");
    expect(a.resolve("127.0.0.1", "1.1.1.1, 203.0.113.7, 10.9.9.9")).toBe("203.0.113.7");
    expect(a.resolve("127.0.0.1", "10.1.1.1, 10.2.2.2")).toBe("10.1.1.1");
    expect(a.resolve("127.0.0.1", "garbage, 10.2.2.2")).toBe("10.2.2.2");
    expect(a.resolve("127.0.0.1", "2001:db8::7, fd00::1")).toBe("2001:db8::7");
    // Hops a proxy writes with the port it got the request from, or bracketed.
    expect(a.resolve("127.0.0.1", "9.9.9.3:4711")).toBe("9.9.9.3");
    expect(a.resolve("127.0.0.1", "9.9.9.4:1, 10.2.2.2:443")).toBe("9.9.9.4");
    expect(a.resolve("127.0.0.1", "[2001:db8::7]:4711")).toBe("2001:db8::7");
    expect(a.resolve("127.0.0.1", "[2001:db8::8]")).toBe("2001:db8::8");
    // Not a hop: a port past the brackets' or the address's end, or a name.
    expect(a.resolve("127.0.0.1", "9.9.9.3:4711:1, 10.2.2.2")).toBe("10.2.2.2");
    expect(a.resolve("127.0.0.1", "2001:db8::7]:1, 10.2.2.2")).toBe("10.2.2.2");
    expect(a.resolve("127.0.0.1", "example.com:80, 10.2.2.2")).toBe("10.2.2.2");
    // Per-address limits count an IPv6 subscriber's whole /64 as one.
    expect(limitKeyOf("2001:db8:1:2:aaaa::1")).toBe(limitKeyOf("2001:db8:1:2:bbbb::2"));
    expect(limitKeyOf("2001:db8:1:2::1")).not.toBe(limitKeyOf("2001:db8:1:3::1"));
    expect(limitKeyOf("203.0.113.7")).toBe("203.0.113.7");
    // Plain IPv4 peers without a header come back as they are; other spellings are canonicalised.
    expect(a.resolve("203.0.113.7", "")).toBe("203.0.113.7");
    expect(a.resolve("127.0.0.1", "")).toBe("127.0.0.1");
    expect(a.resolve("0x7f.0.0.1", "")).toBe("127.0.0.1");
    expect(a.resolve("not an address", "")).toBe("not an address");
    expect(limitKeyOf("255.255.255.255")).toBe("255.255.255.255");
  });
});
