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

/**
 * LIVECOUNT_SOCKET_MAX_REFUSED at its limit: the refusals since the socket's budget was last full
 * are answered `rate_limited` up to one short of it, and the one that reaches it closes the socket
 * (1008); a socket that lets its budget fill starts again from none.
 */
describe("gateway - frames refused before a socket is closed", () => {
  const RATE = 2;
  const SMALL_BURST = 4;
  const MAX_REFUSED = 5;
  /** How long an empty budget takes to fill, with a second's slack. */
  const FILLS_MS = (SMALL_BURST / RATE) * 1000 + 1000;
  let platform: TestPlatform;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_SOCKET_RATE: String(RATE),
      LIVECOUNT_SOCKET_BURST: String(SMALL_BURST),
      LIVECOUNT_SOCKET_MAX_REFUSED: String(MAX_REFUSED),
    });
  });

  afterAll(async () => {
    await platform?.close();
  });

  const refusals = (client: TestClient): number =>
    client.received.filter((r) => r.frame.type === "error" && r.frame.code === "rate_limited").length;

  test("LIVECOUNT_SOCKET_MAX_REFUSED - one refusal short of it is answered; the one that reaches it closes with 1008", async () => {
    const client = await platform.connect();
    for (let i = 0; i < SMALL_BURST + 2 * MAX_REFUSED; i++) client.send({ type: "ping" });
    const closed = await client.closed;
    expect(closed.code).toBe(1008);
    expect(refusals(client)).toBe(MAX_REFUSED - 1);
  });

  test("LIVECOUNT_SOCKET_MAX_REFUSED - a socket whose budget filled again starts from none: refusals now and then never close it", async () => {
    const client = await platform.connect();
    for (let round = 0; round < 3; round++) {
      // The burst, and refusals up to one short of the limit (one more if the budget rounded down).
      const sent = SMALL_BURST + MAX_REFUSED - 1;
      const from = client.received.length;
      for (let i = 0; i < sent; i++) client.send({ type: "ping" });
      await expect.poll(() => client.received.length - from, { timeout: 5000 }).toBe(sent);
      await sleep(FILLS_MS);
    }
    // Three rounds refused more than the limit in all, and the socket still answers.
    expect(refusals(client)).toBeGreaterThanOrEqual(MAX_REFUSED);
    await client.ping();
  });
});
