import type { Bus } from "@livecount/bus";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { Registry } from "prom-client";
import { BusPulse, registerBusPulseMetrics } from "../src/bus_pulse.js";

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

describe("cluster - bus pulse", () => {
  test("cluster - the broker's answers, one round trip at a time: heardAt stays and unansweredSince holds while none comes", async () => {
    const clock = new ManualClock();
    const broker = new Broker();
    const pulse = new BusPulse({ bus: broker.bus, clock, intervalMs: INTERVAL_MS });
    const startedAt = clock.now();
    pulse.start();
    expect([pulse.heardAt, pulse.unansweredSince, broker.calls]).toEqual([startedAt, startedAt, 1]);

    // Answered at once, every interval.
    for (let i = 0; i < 3; i++) {
      broker.answerAll();
      await clock.advance(INTERVAL_MS);
    }
    broker.answerAll();
    await clock.advance(0);
    expect([pulse.heardAt, pulse.unansweredSince, broker.calls]).toEqual([clock.now(), undefined, 4]);

    // Frozen: the round trip sent next is not answered, and no other goes out meanwhile.
    const answeredAt = clock.now();
    await clock.advance(INTERVAL_MS);
    const frozenSentAt = clock.now();
    await clock.advance(INTERVAL_MS * 10);
    expect([pulse.heardAt, pulse.unansweredSince, broker.calls]).toEqual([answeredAt, frozenSentAt, 5]);
    // A message delivered meanwhile says the bus carries; the round trip is still unanswered.
    await clock.advance(INTERVAL_MS);
    pulse.delivered();
    expect([pulse.heardAt, pulse.unansweredSince, broker.calls]).toEqual([clock.now(), frozenSentAt, 5]);
    // Thawed: the answer comes, and the pulse goes on.
    broker.answerAll();
    await clock.advance(0);
    expect([pulse.heardAt, pulse.unansweredSince]).toEqual([clock.now(), undefined]);
    await clock.advance(INTERVAL_MS);
    expect(broker.calls).toBe(6);

    // Down: round trips fail; each interval tries again, and the first unanswered one still counts.
    const downSentAt = clock.now();
    const lastAnswer = pulse.heardAt;
    for (let i = 0; i < 4; i++) {
      broker.failAll();
      await clock.advance(INTERVAL_MS);
    }
    expect([pulse.heardAt, pulse.unansweredSince, broker.calls]).toEqual([lastAnswer, downSentAt, 10]);
    pulse.stop();
    await clock.advance(INTERVAL_MS * 4);
    expect(broker.calls).toBe(10);
  });

  test("cluster - livecount_counter_bus_unanswered_seconds is 0 while the broker answers, and how long the oldest round trip has waited while it does not", async () => {
    const clock = new ManualClock();
    const broker = new Broker();
    const pulse = new BusPulse({ bus: broker.bus, clock, intervalMs: INTERVAL_MS });
    const registry = new Registry();
    registerBusPulseMetrics(registry, "livecount_counter", pulse, clock);
    const unanswered = async (): Promise<number> =>
      (await registry.getSingleMetric("livecount_counter_bus_unanswered_seconds")!.get()).values[0]!.value;
    pulse.start();
    broker.answerAll();
    await clock.advance(0);
    expect(await unanswered()).toBe(0);
    await clock.advance(INTERVAL_MS);
    await clock.advance(INTERVAL_MS * 12);
    expect(await unanswered()).toBe((INTERVAL_MS * 12) / 1000);
    broker.answerAll();
    await clock.advance(0);
    expect(await unanswered()).toBe(0);
    pulse.stop();
  });
});
