/**
 * A request whose body length is ambiguous (RFC 9112, 6.3) has its connection closed before it is
 * served, and nothing behind it on the connection is answered, so bytes a proxy in front would read
 * as a request of their own are never read as one here: Content-Length headers that differ, values
 * of one that differ, or Content-Length beside Transfer-Encoding (uWS refuses some of these itself,
 * with a 400). The same length given twice is one length.
 */
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";

/** Writes `raw` on a fresh connection; resolves with all it got back once the server closed it or went quiet. */
function exchange(url: string, raw: string, quietMs = 500): Promise<{ text: string; closed: boolean }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    let text = "";
    let timer: ReturnType<typeof setTimeout> | undefined;
    const socket = connect(Number(port), hostname, () => socket.write(raw));
    const done = (closed: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ text, closed });
    };
    const quiet = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => done(false), quietMs);
    };
    socket.on("data", (chunk: Buffer) => {
      text += chunk.toString("latin1");
      quiet();
    });
    socket.once("close", () => done(true));
    socket.once("error", reject);
    quiet();
  });
}

const BODY = '{"action":"increment","counter":"likes","by":1}';

/** `livecount_gateway_requests_dropped_total{reason="ambiguous_length"}` now. */
async function dropped(platform: TestPlatform): Promise<number> {
  const series = 'livecount_gateway_requests_dropped_total{reason="ambiguous_length"} ';
  const line = (await platform.metricsText()).split("\n").find((l) => l.startsWith(series));
  return line === undefined ? 0 : Number(line.slice(series.length));
}

const statuses = (text: string): string[] => [...text.matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => m[1]!);

describe("gateway - request framing", () => {
  let platform: TestPlatform;
  beforeAll(async () => {
    platform = await TestPlatform.start();
  });
  afterAll(() => platform.close());

  /** A like on `page` with `headers` for its length, its 47-byte body, then `behind` on the same connection. */
  const like = (page: string, headers: string[], behind = ""): string =>
    [
      `PUT /v1/pages/${page}/counter HTTP/1.1`,
      "Host: x",
      `Authorization: Bearer ${TEST_PUBLISHER_KEY}`,
      "Content-Type: application/json",
      `Idempotency-Key: ${page}-1`,
      ...headers,
      "",
      `${BODY}${behind}`,
    ].join("\r\n");

  test.each([
    ["two Content-Length headers that differ", "cl-cl", ["Content-Length: 47", "Content-Length: 2"]],
    ["one Content-Length header with two values", "cl-list", ["Content-Length: 47, 2"]],
    ["Content-Length and Transfer-Encoding", "cl-te", ["Content-Length: 47", "Transfer-Encoding: chunked"]],
  ])(
    "gateway - %s: the connection closed, nothing counted, nothing behind it answered",
    async (_, name, headers) => {
      const page = `framing-${name}`;
      const smuggled = `GET /v1/pages/${page}/counter HTTP/1.1\r\nHost: x\r\n\r\n`;
      const before = await dropped(platform);
      const { text, closed } = await exchange(platform.url, like(page, headers, smuggled));
      // Closed unanswered, and counted for operators, or answered 400 by uWS itself; never a 200.
      expect(statuses(text).filter((status) => status !== "400")).toEqual([]);
      expect(await dropped(platform)).toBe(before + (statuses(text).length === 0 ? 1 : 0));
      expect(closed).toBe(true);
      expect((await platform.counter(page)).counters).toEqual({});
    },
  );

  test("gateway - the same Content-Length twice is one length: the like counts", async () => {
    const page = "framing-same";
    const { text } = await exchange(platform.url, like(page, ["Content-Length: 47", "Content-Length: 47"]));
    expect(statuses(text)).toEqual(["200"]);
    expect((await platform.counter(page)).counters).toEqual({ likes: 1 });
  });

  test("gateway - an upgrade with Content-Length headers that differ is closed, not upgraded", async () => {
    const upgrade = [
      "GET /ws HTTP/1.1",
      "Host: x",
      "Upgrade: websocket",
      "Connection: Upgrade",
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
      "Sec-WebSocket-Version: 13",
      "Content-Length: 0",
      "Content-Length: 5",
      "",
      "",
    ].join("\r\n");
    const before = await dropped(platform);
    const { text, closed } = await exchange(platform.url, upgrade);
    expect(statuses(text)).toEqual([]);
    expect(await dropped(platform)).toBe(before + 1);
    expect(closed).toBe(true);
  });
});
