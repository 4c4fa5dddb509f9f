import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { sleep } from "../../../test/support/eventually.js";
import { TestPlatform } from "../../../test/support/platform.js";
import type { TestClient } from "../../../test/support/ws_client.js";

const RATE_PER_S = 2;
const BURST = 10;

/** Sends `n` pings at once and waits for an answer to each: how many were pongs. */
async function pingBurst(client: TestClient, n: number): Promise<number> {
  const from = client.received.length;
  for (let i = 0; i < n; i++) client.send({ type: "ping" });
  await expect.poll(() => client.received.length - from, { timeout: 5000 }).toBe(n);
  const answers = client.received.slice(from).map((r) => r.frame);
  const pongs = answers.filter((f) => f.type === "pong").length;
  expect(answers.filter((f) => f.type === "error" && f.code === "rate_limited")).toHaveLength(n - pongs);
  return pongs;
}

/** LIVECOUNT_SOCKET_RATE / LIVECOUNT_SOCKET_BURST at their limit, over a real socket. */
describe("gateway - frame rate limit per socket", () => {
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_SOCKET_RATE: String(RATE_PER_S),
      LIVECOUNT_SOCKET_BURST: String(BURST),
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  test("gateway - a socket sends its burst at once (one frame more at most), then its rate", async () => {
    const client = await platform.connect();
    const first = await pingBurst(client, 3 * BURST);
    expect(first).toBeGreaterThanOrEqual(BURST);
    expect(first).toBeLessThanOrEqual(BURST + 1);
    // An empty bucket refills at the rate: a second brings RATE_PER_S frames, not a burst.
    await sleep(1000);
    const refilled = await pingBurst(client, BURST);
    expect(refilled).toBeGreaterThanOrEqual(RATE_PER_S);
    expect(refilled).toBeLessThan(BURST);
    // Another socket has a bucket of its own.
    const other = await platform.connect();
    expect(await pingBurst(other, BURST)).toBe(BURST);
  });
});
