import { MemoryBus, gatewaySubject, gatewaysSubject } from "@livecount/bus";
import { encodeMessage, type GatewayHeartbeat } from "@livecount/protocol";
import { silentLogger } from "@livecount/runtime";
import { afterEach, describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import {
  GatewayHeartbeatSender,
  listenToGateways,
  probeGateway,
  probeReleasedGateway,
} from "../src/gateway_heartbeat.js";
import { WARN, logLines } from "./log_lines.js";

const LEASE_MS = 9_000;

describe("cluster - gateway heartbeat", () => {
  let bus: MemoryBus;
  afterEach(async () => bus.close());

  function setUp(
    onStall: (ms: number) => void = () => {},
    released?: { resyncAll(): void; readonly reconnects: number },
  ) {
    const clock = new ManualClock();
    bus = new MemoryBus({ clock });
    const beats: GatewayHeartbeat[] = [];
    listenToGateways(bus, "dc1", silentLogger, (beat) => beats.push(beat));
    const sender = new GatewayHeartbeatSender({
      bus,
      clock,
      logger: silentLogger,
      dc: "dc1",
      gateway: "gw-1",
      node: "gw",
      startedAt: 1_000,
      leaseMs: LEASE_MS,
      onStall,
      ...(released !== undefined ? { released } : {}),
    });
    return { clock, beats, sender };
  }

  test("cluster - a gateway beats every third of its lease, then says down when stopped", async () => {
    const { clock, beats, sender } = setUp();
    sender.start();
    await bus.flush();
    expect(beats).toEqual([
      { type: "gateway", gateway: "gw-1", node: "gw", startedAt: 1_000, leaseMs: LEASE_MS, state: "up" },
    ]);
    await clock.advance(LEASE_MS / 3 - 1);
    await bus.flush();
    expect(beats).toHaveLength(1);
    await clock.advance(1);
    await bus.flush();
    expect(beats).toHaveLength(2);
    sender.stop();
    await clock.advance(LEASE_MS);
    await bus.flush();
    expect(beats.map((b) => b.state)).toEqual(["up", "up", "down"]);
  });

  test("cluster - a running gateway answers probes of its incarnation; once stopped, or never started, it is gone", async () => {
    const { clock, sender } = setUp();
    const probe = () => probeGateway(bus, "dc1", "gw-1", 100);
    expect(await probe()).toBe("gone");
    sender.start();
    expect(await probe()).toBe("alive");
    // Another DC's gateway of the same id, and another incarnation of the node, are not this one.
    expect(await probeGateway(bus, "dc2", "gw-1", 100)).toBe("gone");
    expect(await probeGateway(bus, "dc1", "gw-2", 100)).toBe("gone");
    await clock.advance(LEASE_MS);
    expect(await probe()).toBe("alive");
    sender.stop();
    expect(await probe()).toBe("gone");
  });

  test("cluster - an owner's probe of a released incarnation has it resync, at most once a heartbeat interval, and learns its reconnects; a sibling's probe does not", async () => {
    let resyncs = 0;
    const released = { resyncAll: () => resyncs++, reconnects: 3 };
    const { clock, sender } = setUp(undefined, released);
    sender.start();
    expect(await probeGateway(bus, "dc1", "gw-1", 100)).toBe("alive");
    expect(resyncs).toBe(0);
    const probe = () => probeReleasedGateway(bus, "dc1", "gw-1", 100);
    expect(await probe()).toEqual({ presence: "alive", reconnects: 3 });
    expect(await probe()).toEqual({ presence: "alive", reconnects: 3 });
    expect(resyncs).toBe(1);
    await clock.advance(LEASE_MS / 3);
    released.reconnects = 4;
    expect(await probe()).toEqual({ presence: "alive", reconnects: 4 });
    expect(resyncs).toBe(2);
    sender.stop();
    expect(await probe()).toEqual({ presence: "gone", reconnects: 0 });
  });

  test("cluster - a probe that gets no answer in time, or no bus, knows nothing: only a missing responder means gone", async () => {
    const clock = new ManualClock();
    bus = new MemoryBus({ clock });
    // Something listens on the subject but does not answer (a stuck process): a timeout.
    bus.subscribe(gatewaySubject("dc1", "stuck"), () => {});
    const answer = probeGateway(bus, "dc1", "stuck", 250);
    await clock.advance(249);
    let settled = false;
    void answer.then(() => (settled = true));
    await clock.advance(0);
    expect(settled).toBe(false);
    await clock.advance(1);
    expect(await answer).toBe("unknown");
    // Any printable id makes a subject of its own, dots and wildcards included.
    expect(await probeGateway(bus, "dc1", "gw.*>", 250)).toBe("gone");
    await bus.close();
    expect(await probeGateway(bus, "dc1", "stuck", 250)).toBe("unknown");
  });

  test("cluster - a heartbeat sent two thirds of a lease late reports the stall, a punctual one never does", async () => {
    const stalls: number[] = [];
    const { clock, sender } = setUp((ms) => stalls.push(ms));
    sender.start();
    await clock.advance(LEASE_MS * 3);
    expect(stalls).toEqual([]);
    // The process did not run: its next timer fires once, a whole lease late.
    clock.jump(LEASE_MS);
    await clock.advance(0);
    expect(stalls).toEqual([LEASE_MS]);
    // Frozen again while the wall clock stepped back further than the freeze: still a stall.
    await clock.advance(LEASE_MS / 3);
    clock.stepWall(-2 * LEASE_MS);
    clock.jump(LEASE_MS);
    await clock.advance(0);
    expect(stalls).toEqual([LEASE_MS, LEASE_MS]);
    sender.stop();
  });

  test("cluster - malformed and foreign messages on the gateway subject are ignored, the malformed ones logged", async () => {
    const { beats } = setUp();
    const { logger, lines } = logLines();
    const logged: GatewayHeartbeat[] = [];
    listenToGateways(bus, "dc1", logger, (beat) => logged.push(beat));
    bus.publish(gatewaysSubject("dc1"), new Uint8Array([0xc1]));
    bus.publish(
      gatewaysSubject("dc1"),
      encodeMessage({ type: "node", node: "n", incarnation: "i", leaseMs: 1, state: "up" }),
    );
    await bus.flush();
    expect(beats).toEqual([]);
    expect(logged).toEqual([]);
    expect(lines).toEqual([
      expect.objectContaining({
        level: WARN,
        msg: "malformed gateway heartbeat",
        err: expect.objectContaining({ type: "ProtocolError" }),
      }),
    ]);
  });

  test("cluster - a stall is a heartbeat more than two thirds of a lease after the previous one", async () => {
    const clock = new ManualClock();
    bus = new MemoryBus({ clock });
    const { logger, lines } = logLines();
    const stalls: number[] = [];
    let beats = 0;
    const sender = new GatewayHeartbeatSender({
      bus,
      clock,
      logger,
      dc: "dc1",
      gateway: "gw-1",
      node: "gw",
      startedAt: 1_000,
      leaseMs: LEASE_MS,
      onStall: (ms) => stalls.push(ms),
      onBeat: () => beats++,
    });
    sender.start();
    expect(beats).toBe(1);
    // The next beat is due a third of a lease later; it goes out a third later still: not a stall.
    clock.jump((2 * LEASE_MS) / 3);
    await clock.advance(0);
    expect(stalls).toEqual([]);
    expect(beats).toBe(2);
    clock.jump((2 * LEASE_MS) / 3 + 1);
    await clock.advance(0);
    expect(stalls).toEqual([(2 * LEASE_MS) / 3 + 1]);
    expect(lines.at(-1)).toMatchObject({
      level: WARN,
      msg: "gateway stalled; resyncing presence",
      silentMs: (2 * LEASE_MS) / 3 + 1,
    });
    // Going down after a long silence is no stall: nobody is left to resync.
    clock.jump(LEASE_MS);
    sender.stop();
    expect(stalls).toHaveLength(1);
    expect(beats).toBe(4);
  });
});
