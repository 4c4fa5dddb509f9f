import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { eventually } from "../../../test/support/eventually.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import type { CountsFrame, TestClient } from "../../../test/support/ws_client.js";

const COUNTS = "livecount.counts";
/**
 * A long window, so changes made together land in one window: the first change of an idle page set
 * goes out at once (leading edge), every change after it within the window goes out together.
 */
const WINDOW_MS = 1000;

/** The latest value of `counter` on `page` that a counts client has seen. */
function lastLikes(client: TestClient, page: string): number | undefined {
  let last: number | undefined;
  for (const f of client.countsFrames()) {
    const value = Object.hasOwn(f.pages, page) ? f.pages[page] : undefined;
    if (value !== undefined) last = value.counters.likes ?? 0;
  }
  return last;
}

describe("gateway - counts frames for clients that negotiate livecount.counts", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({ LIVECOUNT_COALESCE_MS: String(WINDOW_MS) });
  });

  afterAll(async () => {
    await platform?.close();
  });

  async function like(page: string): Promise<number> {
    const res = await fetch(`${platform.url}/v1/pages/${encodeURIComponent(page)}/counter`, {
      method: "PUT",
      headers: {
        authorization: `Bearer ${TEST_PUBLISHER_KEY}`,
        "content-type": "application/json",
        "idempotency-key": `counts-${page}-${Math.random()}`,
      },
      body: JSON.stringify({ action: "increment", counter: "likes", by: 1 }),
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { value: number }).value;
  }

  /** Watches `pages` and waits until the client has a value of each. */
  async function watchAll(client: TestClient, pages: readonly string[]): Promise<void> {
    for (const page of pages) client.watch(page);
    await eventually(
      () => {
        for (const page of pages)
          if (lastLikes(client, page) === undefined) throw new Error(`no ${page} yet`);
      },
      { timeoutMs: 3 * WINDOW_MS + 2000 },
    );
  }

  test("gateway - a client offering livecount.counts gets it named back; one offering nothing or something else does not", async () => {
    const counts = await platform.connect({ protocols: ["other", COUNTS] });
    expect(counts.ws.protocol).toBe(COUNTS);
    const plain = await platform.connect();
    expect(plain.ws.protocol).toBe("");
    // Protocol v1 gateways answer an offer they do not know with its first value: unchanged.
    const other = await platform.connect({ protocols: ["other"] });
    expect(other.ws.protocol).toBe("other");
    const two = await platform.connect({ protocols: ["other", "superchat"] });
    expect(two.ws.protocol).toBe("other");
    // Offers on several header lines are one list (RFC 6455 11.3.4).
    const answer = await rawUpgradeAnswer([
      "Sec-WebSocket-Protocol: other",
      `Sec-WebSocket-Protocol: ${COUNTS}`,
    ]);
    expect(answer).toMatch(/^HTTP\/1\.1 101 /);
    expect(answer.toLowerCase()).toContain(`\r\nsec-websocket-protocol: ${COUNTS}\r\n`);
  });

  /** The head of the gateway's answer to an upgrade with `extra` header lines, over a raw socket. */
  async function rawUpgradeAnswer(extra: readonly string[]): Promise<string> {
    const socket = connect({ host: "127.0.0.1", port: Number(new URL(platform.url).port) });
    const head = [
      "GET /ws HTTP/1.1",
      "Host: localhost",
      "Upgrade: websocket",
      "Connection: Upgrade",
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
      "Sec-WebSocket-Version: 13",
      ...extra,
    ];
    socket.write(`${head.join("\r\n")}\r\n\r\n`);
    let answer = "";
    for await (const chunk of socket) {
      answer += (chunk as Buffer).toString("latin1");
      if (answer.includes("\r\n\r\n")) break;
    }
    socket.destroy();
    return answer;
  }

  test("gateway - changes of several pages in one window reach a counts client in one frame, and a v1 client as count frames", async () => {
    const pages = ["counts-a", "counts-b", "counts-c"];
    const counts = await platform.connect({ protocols: [COUNTS] });
    const v1 = await platform.connect();
    await watchAll(counts, pages);
    for (const page of pages) v1.watch(page);
    await eventually(() => {
      for (const page of pages) if (v1.lastCount(page) === undefined) throw new Error(`no ${page} yet`);
    });
    const from = counts.countsFrames().length;

    const finals = await Promise.all(pages.map((page) => like(page)));

    await eventually(
      () => {
        pages.forEach((page, i) => {
          if (lastLikes(counts, page) !== finals[i]) throw new Error(`${page} not final yet`);
          if (v1.lastCount(page)?.counters.likes !== finals[i]) throw new Error(`${page} not final at v1`);
        });
      },
      { timeoutMs: 3 * WINDOW_MS + 2000 },
    );
    const after = counts.countsFrames().slice(from);
    // At most the first change goes out alone (leading edge); the others share the next window.
    expect(after.length).toBeLessThanOrEqual(2);
    expect(Math.max(...after.map((f) => Object.keys(f.pages).length))).toBeGreaterThanOrEqual(2);
    for (const f of after) {
      expect(f).toEqual({ type: "counts", ts: expect.any(Number), pages: expect.any(Object) });
      for (const [page, value] of Object.entries(f.pages)) {
        expect(pages).toContain(page);
        expect(value).toEqual({
          viewers: 0,
          active: 0,
          connections: 0,
          counters: { likes: expect.any(Number) },
          dcs: expect.any(Array),
          lag_ms: 0,
        });
      }
    }
    // Each page's value in a counts frame is exactly what the v1 client's count frame carries.
    for (const page of pages) {
      const { type, page: named, ts, ...value } = v1.lastCount(page)!;
      expect([type, named]).toEqual(["count", page]);
      const last = after.findLast((f) => Object.hasOwn(f.pages, page))!;
      expect(last.ts).toBe(ts);
      expect(last.pages[page]).toEqual(value);
    }
    // The v1 client never sees a counts frame.
    expect(v1.received.every((r) => r.frame.type !== "counts")).toBe(true);
    expect(counts.received.every((r) => r.frame.type !== "count")).toBe(true);
  });

  test("gateway - a counts client joining gets its page's current value in a counts frame at once", async () => {
    const page = "counts-join";
    await like(page);
    const watcher = await platform.watcher(page);
    const client = await platform.connect({ protocols: [COUNTS] });
    client.join(page, "counts-viewer");
    const first = await client.next(
      (f): f is CountsFrame => f.type === "counts" && Object.hasOwn(f.pages, page),
    );
    expect(first.pages[page]?.counters).toEqual({ likes: 1 });
    // The join counts like any other.
    await watcher.waitForViewers(page, 1, 3 * WINDOW_MS + 2000);
    await eventually(
      () => {
        const last = client.countsFrames().findLast((f) => Object.hasOwn(f.pages, page));
        if (last?.pages[page]?.viewers !== 1) throw new Error("viewers not 1 yet");
      },
      { timeoutMs: 3 * WINDOW_MS + 2000 },
    );
  });

  test("gateway - after an unwatch a counts client gets no value of that page, and still gets the others", async () => {
    const [kept, dropped] = ["counts-kept", "counts-dropped"];
    const client = await platform.connect({ protocols: [COUNTS] });
    await watchAll(client, [kept, dropped]);
    client.unwatch(dropped);
    await client.ping();
    const from = client.countsFrames().length;
    await like(dropped);
    const final = await like(kept);
    await eventually(
      () => {
        if (lastLikes(client, kept) !== final) throw new Error("kept page not final yet");
      },
      { timeoutMs: 3 * WINDOW_MS + 2000 },
    );
    // Anything of the dropped page would precede this pong on the same connection.
    await client.ping();
    for (const f of client.countsFrames().slice(from)) expect(Object.keys(f.pages)).toEqual([kept]);
  });

  test("gateway - a counts client watching in msgpack gets binary counts frames carrying its pages", async () => {
    const pages = ["counts-m1", "counts-m2"];
    const client = await platform.connect({ protocols: [COUNTS], encoding: "msgpack" });
    await watchAll(client, pages);
    const from = client.received.length;
    const finals = await Promise.all(pages.map((page) => like(page)));
    await eventually(
      () => {
        pages.forEach((page, i) => {
          if (lastLikes(client, page) !== finals[i]) throw new Error(`${page} not final yet`);
        });
      },
      { timeoutMs: 3 * WINDOW_MS + 2000 },
    );
    const after = client.received.slice(from);
    expect(after.every((r) => r.binary && r.frame.type === "counts")).toBe(true);
    expect(after.length).toBeLessThanOrEqual(2);
    const frames = after.map((r) => r.frame as CountsFrame);
    expect(Math.max(...frames.map((f) => Object.keys(f.pages).length))).toBe(2);
    // The bytes are a msgpack map of type, ts and pages, in that order, like the JSON frame.
    expect(Object.keys(frames[0]!)).toEqual(["type", "ts", "pages"]);
  });
});
