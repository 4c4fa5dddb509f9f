/**
 * The request body limit (64 KiB, protocol v1) at its edges, over raw connections: a body of
 * exactly the limit is served; past it the answer is 413 `payload_too_large`, the body read to its
 * end and dropped so the connection serves the next request, but only up to the limit again: past
 * twice the limit the 413 closes the connection, and a body streamed on is not read to its end. A
 * body sent where no route reads it closes its connection with the answer.
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { MAX_BODY_BYTES } from "../src/gateway_config.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { openRaw, statuses, streamUntilClosed } from "../../../test/support/raw_http.js";

/** A like's head for a body of `length` bytes, each request with its own key. */
let keys = 0;
function putHead(page: string, length: number): string {
  return (
    `PUT /v1/pages/${page}/counter HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ${TEST_PUBLISHER_KEY}\r\n` +
    `Idempotency-Key: body-limit-${++keys}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`
  );
}

/** A valid like of exactly `length` bytes: JSON followed by whitespace. */
function likeBody(length: number): string {
  const json = JSON.stringify({ action: "increment", counter: "likes" });
  return json + " ".repeat(length - json.length);
}

const HEALTH = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";

describe("gateway - request body limit", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start();
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("protocol - a body of exactly 64 KiB is served; one byte more is 413, and the connection serves the next request", async () => {
    const page = "body-limit-edge";
    const conn = await openRaw(platform.app.port);
    conn.socket.write(putHead(page, MAX_BODY_BYTES) + likeBody(MAX_BODY_BYTES));
    await expect.poll(() => statuses(conn.received())).toEqual([200]);
    conn.socket.write(putHead(page, MAX_BODY_BYTES + 1) + likeBody(MAX_BODY_BYTES + 1));
    await expect.poll(() => statuses(conn.received())).toEqual([200, 413]);
    expect(conn.received()).toContain('"code":"payload_too_large"');
    conn.socket.write(HEALTH);
    await expect.poll(() => statuses(conn.received())).toEqual([200, 413, 200]);
    conn.socket.destroy();
    expect((await platform.counter(page)).counters).toEqual({ likes: 1 });
  });

  test("protocol - a body of twice the limit is read to its end after the 413; one byte more and the 413 closes the connection", async () => {
    const page = "body-limit-twice";
    const kept = await openRaw(platform.app.port);
    kept.socket.write(putHead(page, 2 * MAX_BODY_BYTES) + likeBody(2 * MAX_BODY_BYTES));
    await expect.poll(() => statuses(kept.received())).toEqual([413]);
    kept.socket.write(HEALTH);
    await expect.poll(() => statuses(kept.received())).toEqual([413, 200]);
    kept.socket.destroy();

    const closing = await openRaw(platform.app.port);
    closing.socket.write(putHead(page, 2 * MAX_BODY_BYTES + 1) + likeBody(2 * MAX_BODY_BYTES + 1));
    await closing.closed;
    expect(statuses(closing.received())).toEqual([413]);
    expect((await platform.counter(page)).counters).toEqual({});
  });

  test("protocol - a body no route reads (a read, a change refused before its body) is answered and its connection closed, the body unread", async () => {
    // Declared far past anything that could be read in the test's time.
    const declared = 1024 * MAX_BODY_BYTES;
    const heads = [
      `GET /healthz HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n`,
      `PUT /v1/pages/body-limit-nokey/counter HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${declared}\r\n\r\n`,
    ];
    const chunkOf = (head: string): string =>
      head.includes("chunked")
        ? `${MAX_BODY_BYTES.toString(16)}\r\n${" ".repeat(MAX_BODY_BYTES)}\r\n`
        : " ".repeat(MAX_BODY_BYTES);
    for (const head of heads) {
      const conn = await openRaw(platform.app.port);
      conn.socket.write(head);
      const written = await streamUntilClosed(conn, chunkOf(head), MAX_BODY_BYTES, declared);
      expect(written, head).toBeLessThan(declared / 2);
      expect([200, 401], head).toContain(statuses(conn.received())[0]);
    }
  });

  test("protocol - a short body no route reads (a change refused before it, a 401) keeps the connection: the next request is answered", async () => {
    const conn = await openRaw(platform.app.port);
    const body = likeBody(100);
    conn.socket.write(
      `PUT /v1/pages/body-limit-short/counter HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${body.length}\r\n\r\n${body}${HEALTH}`,
    );
    await expect.poll(() => statuses(conn.received())).toEqual([401, 200]);
    conn.socket.destroy();
  });

  test("protocol - an event stream sent with a body is refused: 400 invalid_body", async () => {
    const conn = await openRaw(platform.app.port);
    conn.socket.write(
      "GET /v1/pages/body-limit-sse/events HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}",
    );
    await expect.poll(() => statuses(conn.received())).toEqual([400]);
    expect(conn.received()).toContain('"code":"invalid_body"');
    conn.socket.destroy();
  });

  test("protocol - a body streamed on past twice the limit is not read to its end: the connection is closed", async () => {
    const declared = 256 * MAX_BODY_BYTES;
    const conn = await openRaw(platform.app.port);
    conn.socket.write(putHead("body-limit-stream", declared));
    const written = await streamUntilClosed(conn, " ".repeat(MAX_BODY_BYTES), MAX_BODY_BYTES, declared);
    // What the kernels' buffers hold besides, not the 16 MiB declared.
    expect(written).toBeLessThan(declared / 2);
  });
});
