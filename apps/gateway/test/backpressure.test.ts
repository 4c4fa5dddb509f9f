import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { eventually } from "../../../test/support/eventually.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";

/** Counters per page, with long names, so every count frame is ~15 KB and buffers fill fast. */
const COUNTERS = 200;
const PAGES = 16;
const BATCH = "/v1/counters/increment";

async function metric(platform: TestPlatform, name: string): Promise<number> {
  const text = await platform.metricsText();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? NaN : Number(line.split(" ")[1]);
}

describe("gateway - slow consumers", () => {
  let platform: TestPlatform;
  const pages = Array.from({ length: PAGES }, (_, i) => `bp-${i}`);
  const counter = (i: number): string => `reaction:${"x".repeat(48)}:${i}`;
  let batchNo = 0;

  async function batch(items: Array<{ page: string; counter: string }>): Promise<void> {
    const body = items.map((it) => ({ ...it, change: 1, id: `b${batchNo}-${it.page}-${it.counter}` }));
    batchNo++;
    const res = await fetch(`${platform.url}${BATCH}`, {
      method: "POST",
      headers: { authorization: `Bearer ${TEST_PUBLISHER_KEY}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(200);
  }

  beforeAll(async () => {
    // A long idle timeout, so only the backpressure limit can close the paused socket in time.
    platform = await TestPlatform.start({
      LIVECOUNT_MAX_BACKPRESSURE_BYTES: "1024",
      LIVECOUNT_IDLE_TIMEOUT_S: "120",
      // Filling the pages takes 3,200 batch items, each a rate token of the publisher key.
      LIVECOUNT_PUBLISHER_BURST: "10000",
    });
    // Fill every page with many counters so each count frame is large.
    for (const page of pages) {
      await batch(Array.from({ length: COUNTERS }, (_, i) => ({ page, counter: counter(i) })));
    }
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("gateway - a socket that stops reading is closed past the backpressure limit; others keep their frames", async () => {
    const slow = await platform.connect();
    for (const page of pages) slow.watch(page);
    const healthy = await platform.connect();
    for (const page of pages) healthy.watch(page);
    await eventually(() => expect(healthy.lastCount(pages[0]!)).toBeDefined());
    expect(await metric(platform, "livecount_gateway_sockets")).toBe(2);

    // The slow client stops reading; its kernel buffers fill, then the gateway's.
    slow.ws.pause();
    let round = 0;
    await eventually(
      async () => {
        round++;
        await batch(pages.map((page) => ({ page, counter: counter(round % COUNTERS) })));
        expect(await metric(platform, "livecount_gateway_sockets")).toBe(1);
      },
      { timeoutMs: 10_000, intervalMs: 25 },
    );

    expect(await closedAs(platform, "slow_consumer")).toBe(1);
    // The healthy socket is untouched and still gets every change.
    expect(healthy.isOpen).toBe(true);
    const likesBefore = healthy.lastCount(pages[0]!)?.counters.likes ?? 0;
    await batch([{ page: pages[0]!, counter: "likes" }]);
    await eventually(() => expect(healthy.lastCount(pages[0]!)?.counters.likes).toBe(likesBefore + 1));
  });

  test("gateway - a socket that negotiated counts frames is held to the same limit", async () => {
    const closedBefore = await closedAs(platform, "slow_consumer");
    const slow = await platform.connect({ protocols: ["livecount.counts"] });
    for (const page of pages) slow.watch(page);
    await eventually(() => expect(slow.countsFrames().length).toBeGreaterThan(0));
    const open = await metric(platform, "livecount_gateway_sockets");

    slow.ws.pause();
    let round = 0;
    await eventually(
      async () => {
        round++;
        await batch(pages.map((page) => ({ page, counter: counter(round % COUNTERS) })));
        expect(await metric(platform, "livecount_gateway_sockets")).toBe(open - 1);
      },
      { timeoutMs: 10_000, intervalMs: 25 },
    );
    expect(await closedAs(platform, "slow_consumer")).toBe(closedBefore + 1);
  });
});

/** `livecount_gateway_sockets_closed_total{reason=...}` (0 when absent). */
async function closedAs(platform: TestPlatform, reason: string): Promise<number> {
  const line = (await platform.metricsText())
    .split("\n")
    .find((l) => l.startsWith(`livecount_gateway_sockets_closed_total{reason="${reason}"}`));
  return line === undefined ? 0 : Number(line.split(" ")[1]);
}
