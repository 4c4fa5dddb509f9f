/** How long a keys message waits for its acknowledgement (ack_wait.ts), from how long they take. */
import { describe, expect, test } from "vitest";
import { AckWait } from "../src/ack_wait.js";

const ACK_WAIT_MS = 2_000;

describe("counter - the wait for an acknowledgement", () => {
  test("counter - ackWaitMs until one is measured, and while they come sooner; doubling each try up to 16 times it", () => {
    const wait = new AckWait(ACK_WAIT_MS);
    expect(wait.firstMs).toBe(ACK_WAIT_MS);
    for (let i = 0; i < 20; i++) wait.took(50);
    expect(wait.firstMs, "acknowledgements in 50 ms never shorten it").toBe(ACK_WAIT_MS);
    expect([1, 2, 3, 4, 5, 6].map((tries) => wait.afterTries(tries) / ACK_WAIT_MS)).toEqual([
      1, 2, 4, 8, 16, 16,
    ]);
  });

  test("counter - as long as they take, with four deviations of room, up to 16 times ackWaitMs", () => {
    const wait = new AckWait(ACK_WAIT_MS);
    wait.took(6_000);
    // The first measure: its deviation is half of it (RFC 6298).
    expect(wait.firstMs).toBe(6_000 + 4 * 3_000);
    for (let i = 0; i < 40; i++) wait.took(6_000);
    expect(wait.firstMs).toBeGreaterThan(6_000);
    expect(wait.firstMs).toBeLessThan(6_100);
    expect(wait.afterTries(2), "doubling from the first wait").toBe(2 * wait.firstMs);
    expect(wait.afterTries(5), "the longest wait is what it was: 16 times ackWaitMs").toBe(16 * ACK_WAIT_MS);
    // Spread between 1 and 11 s: the deviation keeps the wait past most of them.
    for (let i = 0; i < 40; i++) wait.took(i % 2 === 0 ? 1_000 : 11_000);
    expect(wait.firstMs).toBeGreaterThan(11_000);
    for (let i = 0; i < 40; i++) wait.took(300_000);
    expect(wait.firstMs).toBe(16 * ACK_WAIT_MS);
  });
});
