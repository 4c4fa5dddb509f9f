import type { Bus } from "@livecount/bus";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { BusPulse } from "../src/bus_pulse.js";

const INTERVAL_MS = 250;

/** A broker whose answers to round trips the test gives: each `flush` waits until answered or failed. */
class Broker {
  readonly pending: Array<{ answer: () => void; fail: (err: Error) => void }> = [];
  calls = 0;
  readonly bus = {
    flush: () => {
      this.calls++;
      return new Promise<void>((answer, fail) => this.pending.push({ answer, fail }));
    },
  } as unknown as Bus;

  answerAll(): void {
    for (const p of this.pending.splice(0)) p.answer();
  }

  failAll(): void {
    for (const p of this.pending.splice(0)) p.fail(new Error("disconnected"));
  }
}

describe("counter - bus pulse", () => {
  test("counter - heardAt follows the broker's answers, one round trip at a time, and stays while none comes", async () => {
    const clock = new ManualClock();
    const broker = new Broker();
    const pulse = new BusPulse({ bus: broker.bus, clock, intervalMs: INTERVAL_MS });
    const startedAt = clock.now();
    pulse.start();
    expect([pulse.heardAt, broker.calls]).toEqual([startedAt, 1]);

    // Answered at once, every interval.
    for (let i = 0; i < 3; i++) {
      broker.answerAll();
      await clock.advance(INTERVAL_MS);
    }
    broker.answerAll();
    await clock.advance(0);
    expect([pulse.heardAt, broker.calls]).toEqual([clock.now(), 4]);

    // Frozen: the round trip in flight is not answered, and no other goes out meanwhile.
    const frozenAt = clock.now();
    await clock.advance(INTERVAL_MS * 10);
    expect([pulse.heardAt, broker.calls]).toEqual([frozenAt, 5]);
    // Thawed: the answer comes, and the pulse goes on.
    broker.answerAll();
    await clock.advance(0);
    expect(pulse.heardAt).toBe(clock.now());
    await clock.advance(INTERVAL_MS);
    expect(broker.calls).toBe(6);

    // Down: round trips fail; each interval tries again, and heardAt stays.
    const downAt = pulse.heardAt;
    for (let i = 0; i < 4; i++) {
      broker.failAll();
      await clock.advance(INTERVAL_MS);
    }
    expect([pulse.heardAt, broker.calls]).toEqual([downAt, 10]);
    pulse.stop();
    await clock.advance(INTERVAL_MS * 4);
    expect(broker.calls).toBe(10);
  });
});
