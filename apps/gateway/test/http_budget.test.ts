/**
 * LIVECOUNT_HTTP_RATE / LIVECOUNT_HTTP_BURST: every HTTP request without a key takes a token from its
 * address's budget, and one past it is answered 429 and its connection closed, so one address cannot
 * hold more keep-alive connections than its budget keeps alive (each must carry a request every
 * 10 s). Raw TCP connections from several loopback source addresses, as an attacker would open them.
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { openRaw, statuses } from "../../../test/support/raw_http.js";
import { PADDED_GET, PADDED_UPGRADE, headOf } from "../../../test/support/request_heads.js";

const BURST = 10;

function request(path: string, headers = ""): string {
  return `GET ${path} HTTP/1.1\r\nHost: t\r\n${headers}\r\n`;
}

/** LIVECOUNT_MAX_HEADER_BYTES' default: a request line and headers, with the blank line that ends them. */
const DEFAULT_HEADER_BYTES = 8192;

describe("gateway - HTTP requests per client address", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_HTTP_RATE: "1",
      LIVECOUNT_HTTP_BURST: String(BURST),
      LIVECOUNT_READ_RATE: "1000",
      LIVECOUNT_READ_BURST: "1000",
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("LIVECOUNT_HTTP_BURST - past its budget an address gets 429 with Retry-After and the connection closed; keyed requests and other addresses are not limited", async () => {
    const conn = await openRaw(platform.app.port, "127.0.0.2");
    conn.socket.write(Array.from({ length: BURST + 2 }, () => request("/healthz")).join(""));
    await conn.closed;
    const text = conn.received();
    // The burst is answered, the rest refused (uWS answers what it already read) and the connection closed.
    expect(statuses(text)).toEqual([...Array<number>(BURST).fill(200), 429, 429]);
    const refusal = text.slice(text.lastIndexOf("HTTP/1.1 429"));
    expect(refusal).toMatch(/\r\nretry-after: \d+\r\n/i);
    expect(refusal).toContain('{"error":{"code":"rate_limited"');

    // A publisher's back end behind the same, spent address is limited by its key, not by the address.
    const keyed = await openRaw(platform.app.port, "127.0.0.2");
    keyed.socket.write(
      request(
        "/v1/pages/budget/counter",
        `Authorization: Bearer ${TEST_PUBLISHER_KEY}\r\nConnection: close\r\n`,
      ),
    );
    await keyed.closed;
    expect(statuses(keyed.received())).toEqual([200]);
    // Another address has its own budget.
    const other = await openRaw(platform.app.port, "127.0.0.3");
    other.socket.write(request("/healthz", "Connection: close\r\n"));
    await other.closed;
    expect(statuses(other.received())).toEqual([200]);
  });

  test("LIVECOUNT_HTTP_RATE - an address cannot keep more connections than its budget: the refused ones are closed by the gateway", async () => {
    const conns = await Promise.all(
      Array.from({ length: 3 * BURST }, () => openRaw(platform.app.port, "127.0.0.4")),
    );
    for (const c of conns) c.socket.write(request("/healthz"));
    // Every connection gets one answer; those past the budget are closed by the gateway.
    await expect
      .poll(() => conns.filter((c) => statuses(c.received()).length === 1).length)
      .toBe(conns.length);
    const refused = conns.filter((c) => statuses(c.received())[0] === 429);
    expect(refused.length).toBeGreaterThanOrEqual(2 * BURST - 1);
    await Promise.all(refused.map((c) => c.closed));
    const open200 = conns.filter((c) => statuses(c.received())[0] === 200);
    expect(open200.length).toBeLessThanOrEqual(BURST + 1);
    for (const c of conns) c.socket.destroy();
  });

  test("LIVECOUNT_HTTP_BURST - a HEAD past the budget is closed without an answer", async () => {
    const conn = await openRaw(platform.app.port, "127.0.0.5");
    const head = (): string => "HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    conn.socket.write(Array.from({ length: BURST }, head).join(""));
    await expect.poll(() => statuses(conn.received()).length).toBe(BURST);
    // One past the burst: no answer, the connection ends.
    conn.socket.write(head());
    await conn.closed;
    expect(statuses(conn.received())).toEqual(Array<number>(BURST).fill(200));
  });

  // A read, and a WebSocket upgrade whose cookies bring its head to the size: each from an address of its own.
  test.each([
    ["a read", PADDED_GET, 200, "127.0.0.6"],
    ["a WebSocket upgrade", PADDED_UPGRADE, 101, "127.0.0.7"],
  ] as const)(
    "LIVECOUNT_MAX_HEADER_BYTES - %s whose head is exactly 8 KiB (the default) is answered %i; one byte more gets the HTTP layer's 431 and a closed connection",
    async (_what, start, status, address) => {
      const atLimit = await openRaw(platform.app.port, address);
      atLimit.socket.write(headOf(DEFAULT_HEADER_BYTES, start));
      await expect.poll(() => statuses(atLimit.received())).toEqual([status]);
      atLimit.socket.destroy();
      const past = await openRaw(platform.app.port, address);
      past.socket.write(headOf(DEFAULT_HEADER_BYTES + 1, start));
      await past.closed;
      expect(statuses(past.received())).toEqual([431]);
    },
  );
});
