import { randomBytes } from "node:crypto";
import { pack } from "msgpackr";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "vitest";
import { eventually, within } from "../../../test/support/eventually.js";
import { TestPlatform } from "../../../test/support/platform.js";
import type { TestClient } from "../../../test/support/ws_client.js";

/** Protocol v1: frames over 16 KiB close the socket with 1009 (message too big). */
const MAX_FRAME_BYTES = 16 * 1024;
const CLOSE_MESSAGE_TOO_BIG = 1009;
/**
 * uWS's own limit: past it uWS drops the connection without a close frame, which a client sees
 * as 1006 (abnormal closure). Nothing on the server can send a close frame there.
 */
const WIRE_FRAME_BYTES = 64 * 1024;
const CLOSE_ABNORMAL = 1006;
/** RFC 6455: the gateway closes a socket that keeps flooding past its rate limit with this. */
const CLOSE_POLICY_VIOLATION = 1008;
const DEFAULT_MAX_PAGES_PER_SOCKET = 64;
/** How long a socket the server must close may stay open. */
const CLOSE_DEADLINE_MS = 5000;

const INVALID_PAGES: ReadonlyArray<[string, unknown]> = [
  ["empty", ""],
  ["129 characters", "p".repeat(129)],
  ["a space", "a page"],
  ["non-ASCII", "café"],
  ["a control character", "a\u0001b"],
  ["a tab", "a\tb"],
  ["DEL", "a\u007f"],
  ["a number", 42],
  ["null", null],
  ["an object", { id: "x" }],
  ["an array", ["x"]],
];

const INVALID_VIEWERS: ReadonlyArray<[string, unknown]> = [
  ["empty", ""],
  ["129 characters", "v".repeat(129)],
  ["a space", "a viewer"],
  ["non-ASCII", "zoë"],
  ["a control character", "v\u0000"],
  ["a number", 7],
  ["null", null],
  ["an object", {}],
];

describe("gateway - hostile input", () => {
  const REFERENCE = "hostile-reference";
  let platform: TestPlatform;
  /** Watches a page with one steady viewer: bad input elsewhere must never move it. */
  let referenceWatcher: TestClient;
  let baselineLocalViewers: number;

  beforeAll(async () => {
    platform = await TestPlatform.start();
    referenceWatcher = await platform.watcher(REFERENCE);
    const steady = await platform.connect();
    steady.join(REFERENCE, "steady");
    await referenceWatcher.waitForViewers(REFERENCE, 1);
  });

  beforeEach(() => {
    baselineLocalViewers = platform.app.gateway.localViewers;
  });

  afterEach(async () => {
    // The process still serves a normal client, and nothing bad input did was counted.
    const page = `after-${Math.random().toString(36).slice(2)}`;
    const client = await platform.connect();
    client.join(page, "normal");
    await client.waitForViewers(page, 1);
    await client.ping();
    client.leave(page);
    await client.ping();
    await referenceWatcher.ping();
    expect(
      referenceWatcher
        .viewerHistory(REFERENCE)
        .slice(1)
        .every((v) => v === 1),
    ).toBe(true);
    await platform.waitForViewers(REFERENCE, 1);
  });

  afterAll(async () => {
    await platform?.close();
  });

  /** Sends a frame and returns the error frame it earned; the socket must answer a ping after it. */
  async function errorFor(
    client: TestClient,
    frame: Readonly<Record<string, unknown>> | string | Buffer,
  ): Promise<{ code: string; message: string }> {
    const from = client.received.length;
    if (typeof frame === "string" || Buffer.isBuffer(frame)) client.sendRaw(frame);
    else client.send(frame);
    const error = await client.nextError(from);
    expect(typeof error.message).toBe("string");
    await client.ping();
    expect(client.isOpen).toBe(true);
    return error;
  }

  test.each(["json", "msgpack"] as const)(
    "gateway - answers invalid page ids with invalid_page and counts nothing (%s)",
    async (encoding) => {
      for (const [, page] of INVALID_PAGES) {
        // One socket per id keeps each well inside the rate limit.
        const client = await platform.connect({ encoding });
        for (const type of ["join", "watch", "leave", "unwatch"]) {
          expect(
            (await errorFor(client, { type, page, viewer: "v1" })).code,
            `${type} ${JSON.stringify(page)}`,
          ).toBe("invalid_page");
        }
        expect(client.received.every((r) => r.frame.type !== "count")).toBe(true);
      }
      const client = await platform.connect({ encoding });
      expect((await errorFor(client, { type: "join", viewer: "v1" })).code).toBe("invalid_page");
      expect((await errorFor(client, { type: "watch" })).code).toBe("invalid_page");
      expect(platform.app.gateway.localViewers).toBe(baselineLocalViewers);
      expect(client.received.every((r) => r.frame.type !== "count")).toBe(true);
    },
  );

  test("gateway - accepts the longest and the edge-character page ids of protocol v1", async () => {
    const client = await platform.connect();
    for (const page of ["p".repeat(128), "!", "~", "a/b?c%d#e"]) {
      client.join(page, "edge");
      await client.waitForViewers(page, 1);
      client.leave(page);
    }
    await client.ping();
  });

  test("gateway - answers invalid viewer ids with invalid_viewer and counts nothing", async () => {
    const page = "hostile-viewer";
    const client = await platform.connect();
    for (const [name, viewer] of INVALID_VIEWERS) {
      expect((await errorFor(client, { type: "join", page, viewer })).code, name).toBe("invalid_viewer");
    }
    // The rejected joins did not subscribe the socket: no count frame came for the page.
    expect(client.counts(page)).toHaveLength(0);
    expect(platform.app.gateway.localViewers).toBe(baselineLocalViewers);
    expect((await platform.counter(page)).viewers).toBe(0);
  });

  test("gateway - answers malformed frames with bad_frame and unknown types with unknown_type, and stays usable", async () => {
    const json = await platform.connect();
    const cases: ReadonlyArray<[string | Readonly<Record<string, unknown>>, string]> = [
      ["{", "bad_frame"],
      ["not json at all", "bad_frame"],
      ["", "bad_frame"],
      ["42", "bad_frame"],
      ["null", "bad_frame"],
      ['"join"', "bad_frame"],
      ['[{"type":"join","page":"x"}]', "bad_frame"],
      ["{}", "bad_frame"],
      ['{"type":42}', "bad_frame"],
      ['{"type":null,"page":"x"}', "bad_frame"],
      [{ type: "subscribe", page: "x" }, "unknown_type"],
      [{ type: "JOIN", page: "x" }, "unknown_type"],
      [{ type: "__proto__" }, "unknown_type"],
      [{ type: "x".repeat(1000) }, "unknown_type"],
    ];
    for (const [frame, code] of cases)
      expect((await errorFor(json, frame)).code, JSON.stringify(frame).slice(0, 60)).toBe(code);

    const binary = await platform.connect({ encoding: "msgpack" });
    for (let i = 0; i < 20; i++)
      expect((await errorFor(binary, randomBytes(1 + i * 13))).code).toMatch(
        /^(bad_frame|unknown_type|invalid_page)$/,
      );
    const binaryCases: ReadonlyArray<[Buffer, string]> = [
      [Buffer.from([0xc1]), "bad_frame"],
      [Buffer.from([0xdf, 0xff, 0xff, 0xff, 0xff]), "bad_frame"],
      [pack(42), "bad_frame"],
      [pack(["join", "x"]), "bad_frame"],
      [pack({ type: "join", page: "x" }).subarray(0, 5), "bad_frame"],
      [Buffer.concat([pack({ type: "ping" }), Buffer.from([0x00])]), "bad_frame"],
      [pack({ type: "join", page: new Date(0) }), "bad_frame"],
      [pack({ type: "hello" }), "unknown_type"],
    ];
    for (const [bytes, code] of binaryCases)
      expect((await errorFor(binary, bytes)).code, bytes.toString("hex")).toBe(code);
    // Text sent to the binary-speaking socket and the reverse are judged by the frame kind, not the socket.
    expect((await errorFor(binary, '{"type":"nope"}')).code).toBe("unknown_type");
    expect((await errorFor(json, pack({ type: "nope" }))).code).toBe("unknown_type");
    expect(platform.app.gateway.localViewers).toBe(baselineLocalViewers);
  });

  test("gateway - answers a frame over the 4 KiB frame limit but under 16 KiB with payload_too_large", async () => {
    const client = await platform.connect();
    const frame = JSON.stringify({ type: "join", page: "big", viewer: "v", pad: "x".repeat(8 * 1024) });
    expect((await errorFor(client, frame)).code).toBe("payload_too_large");
    expect(platform.app.gateway.localViewers).toBe(baselineLocalViewers);
  });

  test("gateway - closes a socket that sends a frame over 16 KiB with 1009, up to uWS's 64 KiB; past that 1006; others go on", async () => {
    const page = "hostile-oversize";
    const bystander = await platform.connect();
    bystander.join(page, "bystander");
    await bystander.waitForViewers(page, 1);

    const text = await platform.connect();
    text.join(page, "text-oversize");
    await text.waitForViewers(page, 2);
    const from = bystander.counts(page).length;
    // At the limit a frame is answered (payload_too_large past the 4 KiB a frame may decode); one byte more closes.
    const atLimit = JSON.stringify({ type: "ping", pad: "x".repeat(MAX_FRAME_BYTES - 24) });
    expect(Buffer.byteLength(atLimit)).toBe(MAX_FRAME_BYTES);
    expect((await errorFor(text, atLimit)).code).toBe("payload_too_large");
    text.sendRaw(`${atLimit} `);
    const textClose = await within(text.closed, CLOSE_DEADLINE_MS, "the oversize text sender's close");
    expect(textClose).toMatchObject({ code: CLOSE_MESSAGE_TOO_BIG, reason: "frame too large" });

    const binary = await platform.connect({ encoding: "msgpack" });
    binary.sendRaw(randomBytes(WIRE_FRAME_BYTES));
    expect((await within(binary.closed, CLOSE_DEADLINE_MS, "the oversize binary sender's close")).code).toBe(
      CLOSE_MESSAGE_TOO_BIG,
    );

    const huge = await platform.connect();
    huge.sendRaw(randomBytes(WIRE_FRAME_BYTES + 1));
    expect((await within(huge.closed, CLOSE_DEADLINE_MS, "the huge frame sender's close")).code).toBe(
      CLOSE_ABNORMAL,
    );

    // The oversize sender's join is released like any closed socket's; the bystander is untouched.
    await bystander.waitForViewers(page, 1);
    await bystander.ping();
    expect(dedupe(bystander.viewerHistory(page).slice(from - 1))).toEqual([2, 1]);
    bystander.leave(page);
    await bystander.ping();
  });

  test("gateway - rate-limits a flood with rate_limited errors, then closes it with 1008", async () => {
    const page = "hostile-flood";
    const bystander = await platform.connect();
    bystander.join(page, "bystander");
    await bystander.waitForViewers(page, 1);

    const from = bystander.counts(page).length;
    const held = platform.app.gateway.localViewers;
    const flooder = await platform.connect();
    flooder.watch(page);
    await flooder.next((f) => f.type === "count" && f.page === page);
    const FLOOD = 5000;
    for (let i = 0; i < FLOOD; i++)
      flooder.send(i % 2 === 0 ? { type: "ping" } : { type: "join", page: `flood-${i}` });
    const closed = await within(flooder.closed, CLOSE_DEADLINE_MS, "the flooder's close");
    expect(closed.code).toBe(CLOSE_POLICY_VIOLATION);
    const errors = flooder.errors();
    expect(errors.length).toBeGreaterThan(0);
    expect(errors.filter((e) => e.code === "rate_limited").length).toBeGreaterThan(10);
    // Far fewer frames were handled than sent.
    const pongs = flooder.received.filter((r) => r.frame.type === "pong").length;
    expect(pongs).toBeLessThan(FLOOD / 4);

    await bystander.ping();
    await platform.waitForViewers(page, 1);
    expect(bystander.viewerHistory(page).slice(from - 1)).toEqual([1]);
    // Whatever the flooder joined before it was cut off is released with its socket.
    await expect.poll(() => platform.app.gateway.localViewers, { timeout: 5000 }).toBe(held);
    bystander.leave(page);
    await bystander.ping();
  });

  test("gateway - refuses more pages than one socket may hold with too_many_pages", async () => {
    const client = await platform.connect();
    for (let i = 0; i < DEFAULT_MAX_PAGES_PER_SOCKET; i++) client.watch(`many-${i}`);
    await client.ping();
    const from = client.received.length;
    client.join("many-overflow", "overflow");
    const error = await client.nextError(from);
    expect(error).toMatchObject({ type: "error", code: "too_many_pages", page: "many-overflow" });
    await client.ping();
    expect(client.counts("many-overflow")).toHaveLength(0);
    expect((await platform.counter("many-overflow")).viewers).toBe(0);
    expect(platform.app.gateway.localViewers).toBe(baselineLocalViewers);
    // Releasing one page makes room again.
    client.unwatch("many-0");
    client.join("many-overflow", "overflow");
    await client.waitForViewers("many-overflow", 1);
    client.leave("many-overflow");
    await client.ping();
  });

  test("gateway - close codes a client picks add no metric series: one reason for all of them", async () => {
    const closed = async (): Promise<Map<string, number>> =>
      new Map(
        (await platform.metricsText())
          .split("\n")
          .filter((line) => line.startsWith("livecount_gateway_sockets_closed_total{"))
          .map((line) => [/reason="([^"]*)"/.exec(line)![1]!, Number(line.split(" ")[1])]),
      );
    const before = await closed();
    // Every range a client may close with (RFC 6455: 3000-3999 registered, 4000-4999 private).
    const picked = [3000, 3999, 4000, 4200, 4999];
    for (const code of picked) {
      const client = await platform.connect();
      await client.close(code);
    }
    // uWS reports 3000-3999 from a client as 1006 (abnormal closure); either way a fixed reason.
    const fixed = ["application", "1006"];
    await eventually(async () => {
      const after = await closed();
      for (const reason of after.keys()) if (!before.has(reason)) expect(fixed).toContain(reason);
      const added = fixed.map((r) => (after.get(r) ?? 0) - (before.get(r) ?? 0));
      expect(added[0]! + added[1]!).toBe(picked.length);
    });
  });
});

/** Collapses runs of equal values: the distinct values in the order they were seen. */
function dedupe(values: readonly number[]): number[] {
  return values.filter((v, i) => i === 0 || values[i - 1] !== v);
}
