import type { Bus } from "@livecount/bus";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { Registry } from "prom-client";
import { BUS_MOVE_HEARTBEATS, BusPulse, BusSilence, registerBusPulseMetrics } from "../src/bus_pulse.js";

const INTERVAL_MS = 250;

/** A broker whose answers to round trips the test gives: each `flush` waits until answered or failed. */
class Broker {
  readonly pending: Array<{ answer: () => void; fail: (err: Error) => void }> = [];
  calls = 0;
  /** When the pulse asked to dial again (`Bus.reconnect`). */
  readonly reconnects: number[] = [];
  status: Bus["status"] = "connected";
  readonly bus: Bus;

  constructor(clock?: ManualClock) {
    const bus = {
      flush: () => {
        this.calls++;
        return new Promise<void>((answer, fail) => this.pending.push({ answer, fail }));
      },
      reconnect: () => {
        this.reconnects.push(clock?.monotonic() ?? 0);
        return true;
      },
    };
    Object.defineProperty(bus, "status", { get: () => this.status });
    this.bus = bus as unknown as Bus;
  }

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
    const startedAt = clock.monotonic();
    pulse.start();
    expect([pulse.heardAt, pulse.unansweredSince, broker.calls]).toEqual([startedAt, startedAt, 1]);

    // Answered at once, every interval.
    for (let i = 0; i < 3; i++) {
      broker.answerAll();
      await clock.advance(INTERVAL_MS);
    }
    broker.answerAll();
    await clock.advance(0);
    expect([pulse.heardAt, pulse.unansweredSince, broker.calls]).toEqual([clock.monotonic(), undefined, 4]);

    // Frozen: the round trip sent next is not answered, and no other goes out meanwhile.
    const answeredAt = clock.monotonic();
    await clock.advance(INTERVAL_MS);
    const frozenSentAt = clock.monotonic();
    await clock.advance(INTERVAL_MS * 10);
    expect([pulse.heardAt, pulse.unansweredSince, broker.calls]).toEqual([answeredAt, frozenSentAt, 5]);
    // A message delivered meanwhile says the bus carries; the round trip is still unanswered.
    await clock.advance(INTERVAL_MS);
    pulse.delivered();
    expect([pulse.heardAt, pulse.unansweredSince, broker.calls]).toEqual([
      clock.monotonic(),
      frozenSentAt,
      5,
    ]);
    // Thawed: the answer comes, and the pulse goes on.
    broker.answerAll();
    await clock.advance(0);
    expect([pulse.heardAt, pulse.unansweredSince]).toEqual([clock.monotonic(), undefined]);
    await clock.advance(INTERVAL_MS);
    expect(broker.calls).toBe(6);

    // Down: round trips fail; each interval tries again, and the first unanswered one still counts.
    const downSentAt = clock.monotonic();
    const lastAnswer = pulse.heardAt;
    for (let i = 0; i < 4; i++) {
      broker.failAll();
      await clock.advance(INTERVAL_MS);
    }
    expect([pulse.heardAt, pulse.unansweredSince, broker.calls]).toEqual([lastAnswer, downSentAt, 10]);
    // Stopped: no round trip goes out any more, though the one in flight has failed.
    pulse.stop();
    broker.failAll();
    await clock.advance(INTERVAL_MS * 4);
    expect(broker.calls).toBe(10);
  });

  test("cluster - the bus is silent once a round trip has waited more than silenceMs and nothing came for as long; the silence goes on until something comes", () => {
    const silenceMs = 2 * INTERVAL_MS;
    const now = 10_000;
    const judged = (heardAt: number, unansweredSince: number | undefined): string =>
      new BusSilence({ heardAt, unansweredSince, delivered: () => {} }, silenceMs).judge(now).state;
    // The in-process bus: nothing unanswered, nothing heard since 0.
    expect(judged(0, undefined)).toBe("carries");
    // Unanswered for exactly silenceMs, or heard exactly silenceMs ago: not yet.
    expect(judged(0, now - silenceMs)).toBe("carries");
    expect(judged(now - silenceMs, 0)).toBe("carries");
    expect(judged(0, now - 1)).toBe("carries");
    expect(judged(now - silenceMs - 1, now - silenceMs - 1)).toBe("silent");

    const health = { heardAt: 0, unansweredSince: 0 as number | undefined, delivered: () => {} };
    const silence = new BusSilence(health, silenceMs);
    expect(silence.judge(now)).toEqual({ state: "silent", from: 0, began: true });
    expect(silence.judge(now + 1)).toEqual({ state: "silent", from: 0, began: false });
    Object.assign(health, { heardAt: now + 2, unansweredSince: undefined });
    expect(silence.judge(now + 2)).toEqual({ state: "ended", from: 0, to: now + 2 });
    expect(silence.silent).toBe(false);
  });

  /** A pulse on a manual clock and a broker the test answers, with its metrics registered. */
  function pulseWithMetrics() {
    const clock = new ManualClock();
    const broker = new Broker(clock);
    const pulse = new BusPulse({ bus: broker.bus, clock, intervalMs: INTERVAL_MS });
    const registry = new Registry();
    registerBusPulseMetrics(registry, "livecount_counter", pulse, clock);
    const unanswered = async (): Promise<number> =>
      (await registry.getSingleMetric("livecount_counter_bus_unanswered_seconds")!.get()).values[0]!.value;
    return { clock, broker, pulse, unanswered };
  }

  test("cluster - livecount_counter_bus_unanswered_seconds is 0 while the broker answers, and how long the oldest round trip has waited while it does not", async () => {
    const { clock, broker, pulse, unanswered } = pulseWithMetrics();
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

  test.each([-60_000, 60_000])(
    "cluster - a wall clock stepped %i ms while a round trip waits is no silence: the pulse times on the monotonic clock",
    async (stepMs) => {
      const { clock, broker, pulse, unanswered } = pulseWithMetrics();
      pulse.start();
      // A round trip is in flight when NTP steps the wall clock; the broker answers the next moment.
      clock.stepWall(stepMs);
      await clock.advance(INTERVAL_MS / 2);
      expect(await unanswered()).toBe(INTERVAL_MS / 2 / 1000);
      expect(new BusSilence(pulse, 2 * INTERVAL_MS).judge(clock.monotonic()).state).toBe("carries");
      broker.answerAll();
      await clock.advance(0);
      expect(pulse.heardAt).toBe(clock.monotonic());
      await answering(clock, broker, MOVE_MS * 3);
      expect(broker.reconnects).toEqual([]);
      pulse.stop();
    },
  );

  const MOVE_MS = BUS_MOVE_HEARTBEATS * INTERVAL_MS;

  /** Moves the clock by `ms`, one interval at a time, the broker answering every round trip. */
  async function answering(clock: ManualClock, broker: Broker, ms: number): Promise<void> {
    for (let t = 0; t < ms; t += INTERVAL_MS) {
      broker.answerAll();
      await clock.advance(INTERVAL_MS);
    }
    broker.answerAll();
    await clock.advance(0);
  }

  /** A pulse whose first round trip was answered; the broker answers nothing after that. */
  async function answeredOnce(): Promise<{ clock: ManualClock; broker: Broker; pulse: BusPulse }> {
    const clock = new ManualClock();
    const broker = new Broker(clock);
    const pulse = new BusPulse({ bus: broker.bus, clock, intervalMs: INTERVAL_MS });
    pulse.start();
    broker.answerAll();
    await clock.advance(0);
    return { clock, broker, pulse };
  }

  test("cluster - a server that answers nothing for four steady heartbeats, with nothing delivered, is left: the bus dials again, once per four more while nothing answers", async () => {
    const { clock, broker, pulse } = await answeredOnce();
    await clock.advance(INTERVAL_MS);
    const sentAt = clock.monotonic();
    expect(pulse.unansweredSince).toBe(sentAt);
    await clock.advance(MOVE_MS - 1);
    expect(broker.reconnects).toEqual([]);
    await clock.advance(1);
    expect(broker.reconnects).toEqual([sentAt + MOVE_MS]);
    expect(pulse.moves).toBe(1);
    // Dialing: nothing more is asked of the bus until it is connected again.
    broker.status = "reconnecting";
    await clock.advance(MOVE_MS * 3);
    expect(broker.reconnects).toHaveLength(1);
    // Connected to a server that answers nothing either: four more steady heartbeats, then again.
    broker.status = "connected";
    const connectedAt = clock.monotonic();
    await clock.advance(MOVE_MS + INTERVAL_MS);
    expect(broker.reconnects).toHaveLength(2);
    expect(broker.reconnects[1]! - connectedAt).toBeLessThanOrEqual(MOVE_MS + INTERVAL_MS);
    // A server that answers ends it: nothing more.
    await answering(clock, broker, MOVE_MS * 3);
    expect(broker.reconnects).toHaveLength(2);
    expect(pulse.moves).toBe(2);
    pulse.stop();
  });

  test("cluster - the server is left once it has answered nothing, and delivered nothing, for exactly four heartbeats", async () => {
    const { clock, broker, pulse } = await answeredOnce();
    await clock.advance(INTERVAL_MS);
    const sentAt = clock.monotonic();
    // Something delivered as the round trip goes out: the silence counts from both at once.
    pulse.delivered();
    await clock.advance(MOVE_MS);
    expect(broker.reconnects).toEqual([sentAt + MOVE_MS]);
    pulse.stop();
  });

  test("cluster - a heartbeat late by one interval, and no more, is on time: a server that answers nothing is still left", async () => {
    const { clock, broker, pulse } = await answeredOnce();
    // Each tick fires one interval after it was due.
    for (let i = 0; i < 8; i++) {
      clock.jump(2 * INTERVAL_MS);
      await clock.advance(0);
    }
    expect(broker.reconnects).not.toEqual([]);
    pulse.stop();
  });

  test("cluster - a process that stalled stays on its server: its answers may wait unread in its socket, so heartbeats must fire on time for four intervals first", async () => {
    const { clock, broker, pulse } = await answeredOnce();
    await clock.advance(INTERVAL_MS);
    // Frozen for three move windows: the first tick after it is late, and judges nothing.
    clock.jump(MOVE_MS * 3);
    await clock.advance(0);
    expect(broker.reconnects).toEqual([]);
    // The answer was in the socket and is read in the same turn of the event loop.
    await answering(clock, broker, MOVE_MS * 2);
    expect(broker.reconnects).toEqual([]);
    // Late ticks keep resetting the count even when nothing answers.
    for (let i = 0; i < 8; i++) {
      clock.jump(INTERVAL_MS * 3);
      await clock.advance(0);
    }
    expect(broker.reconnects).toEqual([]);
    // Then steady again, still unanswered: four on-time heartbeats later it moves.
    await clock.advance(MOVE_MS);
    expect(broker.reconnects).toEqual([]);
    await clock.advance(INTERVAL_MS);
    expect(broker.reconnects).toHaveLength(1);
    pulse.stop();
  });

  test("cluster - a server slow to answer round trips but delivering messages is not left", async () => {
    const { clock, broker, pulse } = await answeredOnce();
    for (let i = 0; i < 40; i++) {
      await clock.advance(INTERVAL_MS / 2);
      pulse.delivered();
    }
    expect(pulse.unansweredSince).toBeDefined();
    expect(broker.reconnects).toEqual([]);
    pulse.stop();
  });

  test("cluster - livecount_counter_bus_moves_total counts each time the pulse left its server", async () => {
    const { clock, broker, pulse } = await answeredOnce();
    const registry = new Registry();
    registerBusPulseMetrics(registry, "livecount_counter", pulse, clock);
    const moves = async (): Promise<number> =>
      (await registry.getSingleMetric("livecount_counter_bus_moves_total")!.get()).values[0]!.value;
    expect(await moves()).toBe(0);
    await clock.advance(INTERVAL_MS + MOVE_MS);
    expect(broker.reconnects).toHaveLength(1);
    expect(await moves()).toBe(1);
    expect(await moves()).toBe(1);
    pulse.stop();
  });
});
