import { BusDisconnectedError, MemoryBus, gatewayIdSubject, gatewaysSubject, type Bus } from "@livecount/bus";
import { encodeMessage, type GatewayHeartbeat } from "@livecount/protocol";
import { silentLogger } from "@livecount/runtime";
import { afterEach, describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import {
  GatewayHeartbeatSender,
  listenToGateways,
  probeReleasedGateway,
  type GatewayHeartbeatOptions,
} from "../src/gateway_heartbeat.js";
import {
  GatewayIdInUseError,
  GatewayIdUnknownError,
  claimGatewayId,
  serveGatewayId,
  type GatewayIdHolder,
} from "../src/gateway_id.js";
import { isLaterTwin } from "../src/twins.js";
import { ERROR, WARN, logLines } from "./log_lines.js";

const LEASE_MS = 9_000;
/** A starting gateway waits this long for each answer: a heartbeat interval. */
const ANSWER_MS = LEASE_MS / 3;
const CLAIM = { dc: "dc1", node: "gw", leaseMs: LEASE_MS };

describe("cluster - one gateway process per node id", () => {
  let bus: MemoryBus;
  let clock: ManualClock;
  afterEach(async () => bus.close());

  function setUp(): void {
    clock = new ManualClock();
    bus = new MemoryBus({ clock });
  }

  /** The heartbeat sender of gateway incarnation `gateway` under node id `gw`, started at `startedAt`. */
  function senderUnderId(
    gateway: string,
    startedAt: number,
    options: Partial<GatewayHeartbeatOptions>,
  ): GatewayHeartbeatSender {
    const base = {
      bus,
      clock,
      logger: silentLogger,
      dc: "dc1",
      node: "gw",
      leaseMs: LEASE_MS,
      onStall: () => {},
    };
    return new GatewayHeartbeatSender({ ...base, ...options, gateway, startedAt });
  }

  /** Claims the id; resolves with when it settled (monotonic) and how. */
  function claim(onBus: Bus = bus, logger = silentLogger) {
    const startedAt = clock.monotonic();
    let settled: { at: number; err?: unknown } | undefined;
    void claimGatewayId(onBus, clock, logger, CLAIM).then(
      () => (settled = { at: clock.monotonic() - startedAt }),
      (err: unknown) => (settled = { at: clock.monotonic() - startedAt, err }),
    );
    return {
      get settled() {
        return settled;
      },
    };
  }

  test("cluster - a free id is claimed at once: nothing serves it (a first start, or a restart after a crash)", async () => {
    setUp();
    const c = claim();
    await clock.advance(0);
    expect(c.settled).toEqual({ at: 0 });
  });

  test("cluster - an id a live gateway serves is refused at once, naming that gateway; it is free once that one stops serving it", async () => {
    setUp();
    const holder: GatewayIdHolder = { incarnation: "gw-1234abcd", startedAt: Date.UTC(2026, 10, 30, 12) };
    const serving = serveGatewayId(bus, "dc1", "gw", holder);
    const c = claim();
    await clock.advance(0);
    expect(c.settled?.at).toBe(0);
    expect(c.settled?.err).toBeInstanceOf(GatewayIdInUseError);
    expect(String(c.settled?.err)).toContain(
      "gateway node id gw is in use in dc1 by incarnation gw-1234abcd, started 2026-11-30T12:00:00.000Z; LIVECOUNT_NODE_ID must be unique per gateway process",
    );
    // Another DC's gateway under the same id is another gateway.
    await expect(claimGatewayId(bus, clock, silentLogger, { ...CLAIM, dc: "dc2" })).resolves.toBeUndefined();
    serving.unsubscribe();
    const again = claim();
    await clock.advance(0);
    expect(again.settled).toEqual({ at: 0 });
  });

  test("cluster - a holder that answers nothing (frozen) is asked for a whole gateway lease, then this one takes its place", async () => {
    setUp();
    bus.subscribe(gatewayIdSubject("dc1", "gw"), () => {});
    const { logger, lines } = logLines();
    const c = claim(bus, logger);
    await clock.advance(LEASE_MS - ANSWER_MS);
    expect(c.settled).toBeUndefined();
    await clock.advance(ANSWER_MS);
    expect(c.settled).toEqual({ at: LEASE_MS });
    expect(lines.at(-1)).toMatchObject({
      level: WARN,
      msg: "a process holds this gateway node id and has not answered for a gateway lease; taking its place",
    });
  });

  test("cluster - a holder that answers within the lease is live: a stall of a moment does not lose it its id", async () => {
    setUp();
    const holder: GatewayIdHolder = { incarnation: "gw-1", startedAt: 1 };
    // It answers nothing to the first two asks (stalled), then answers the third.
    const silent = bus.subscribe(gatewayIdSubject("dc1", "gw"), () => {});
    const c = claim();
    await clock.advance(ANSWER_MS * 1.5);
    silent.unsubscribe();
    serveGatewayId(bus, "dc1", "gw", holder);
    await clock.advance(ANSWER_MS);
    expect(c.settled?.at).toBe(2 * ANSWER_MS);
    expect(c.settled?.err).toBeInstanceOf(GatewayIdInUseError);
  });

  test("cluster - with the bus down the claim is tried again for a lease, then fails rather than guess", async () => {
    setUp();
    const down = {
      request: () => Promise.reject(new BusDisconnectedError("the bus is down")),
    } as unknown as Bus;
    const c = claim(down);
    await clock.advance(LEASE_MS - 100);
    expect(c.settled).toBeUndefined();
    await clock.advance(200);
    expect(c.settled?.err).toBeInstanceOf(GatewayIdUnknownError);
  });

  test("cluster - the later of two processes keeps the id, ties to the greater incarnation; a process is never its own twin", () => {
    const self = { incarnation: "gw-b", startedAt: 100 };
    expect(isLaterTwin(self, { incarnation: "gw-a", startedAt: 101 })).toBe(true);
    expect(isLaterTwin(self, { incarnation: "gw-c", startedAt: 99 })).toBe(false);
    expect(isLaterTwin(self, { incarnation: "gw-c", startedAt: 100 })).toBe(true);
    expect(isLaterTwin(self, { incarnation: "gw-a", startedAt: 100 })).toBe(false);
    expect(isLaterTwin(self, { ...self })).toBe(false);
  });

  test("cluster - a running gateway serves its id, hears a later process beating under it and stops once; an earlier one is logged and left to stop", async () => {
    setUp();
    const { logger, lines } = logLines();
    const superseded: GatewayIdHolder[] = [];
    const sender = (gateway: string, startedAt: number) =>
      senderUnderId(gateway, startedAt, { logger, onSuperseded: (by) => superseded.push(by) });
    const first = sender("gw-1", 1_000);
    first.start();
    await clock.advance(0);
    const c = claim();
    await clock.advance(0);
    expect(c.settled?.err).toBeInstanceOf(GatewayIdInUseError);
    // A later process beats under the id (it replaced this one while it was frozen).
    const later = sender("gw-2", 2_000);
    later.start();
    await clock.advance(0);
    expect(superseded).toEqual([{ incarnation: "gw-2", startedAt: 2_000 }]);
    // Superseded, it beats no more (its gateway stops); heard again, it is not superseded twice.
    await clock.advance(LEASE_MS);
    expect(superseded).toHaveLength(1);
    // An earlier process that goes on beating (of a release without this rule) is logged by the later.
    const beat: GatewayHeartbeat = {
      type: "gateway",
      gateway: "gw-1",
      node: "gw",
      startedAt: 1_000,
      leaseMs: LEASE_MS,
      state: "up",
    };
    bus.publish(gatewaysSubject("dc1"), encodeMessage(beat));
    await clock.advance(0);
    expect(lines).toContainEqual(
      expect.objectContaining({
        level: ERROR,
        msg: "another live gateway announces this node id; it started earlier and stops once it hears this one (LIVECOUNT_NODE_ID must be unique per gateway process)",
        incarnation: "gw-1",
      }),
    );
    // Stopped, both leave the id free.
    first.stop();
    later.stop();
    const free = claim();
    await clock.advance(0);
    expect(free.settled).toEqual({ at: 0 });
  });

  test("cluster - a gateway frozen for a lease resyncs at once but listens before it beats again: it yields to a process under its id whatever their clocks say", async () => {
    setUp();
    const interval = LEASE_MS / 3;
    const superseded: Record<string, GatewayIdHolder[]> = { "gw-1": [], "gw-2": [] };
    const stalls: number[] = [];
    const resyncs: string[] = [];
    const upBeats: string[] = [];
    listenToGateways(bus, "dc1", silentLogger, (beat) => {
      if (beat.state === "up") upBeats.push(beat.gateway);
    });
    const sender = (gateway: string, startedAt: number) =>
      senderUnderId(gateway, startedAt, {
        onStall: (ms) => stalls.push(ms),
        onSuperseded: (by) => superseded[gateway]!.push(by),
        released: { resyncAll: () => resyncs.push(gateway), reconnects: 0 },
      });
    // Its clock runs a minute ahead of its successor's: by their starts it would be the later one.
    const frozen = sender("gw-1", 60_000 + 1_000);
    frozen.start();
    await clock.advance(0);
    clock.jump(LEASE_MS + interval);
    await clock.advance(0); // thawed: its overdue beat finds the freeze, and listens instead
    expect(upBeats).toEqual(["gw-1"]);
    // It gave its viewers again at once; an owner that let it go and asks now gets no second resync.
    expect(stalls).toEqual([LEASE_MS + interval]);
    await expect(probeReleasedGateway(bus, "dc1", "gw-1", interval)).resolves.toMatchObject({
      presence: "alive",
    });
    expect(resyncs).toEqual([]);
    const successor = sender("gw-2", 5_000);
    successor.start();
    await clock.advance(1.5 * interval);
    expect(superseded).toEqual({ "gw-1": [{ incarnation: "gw-2", startedAt: 5_000 }], "gw-2": [] });
    await clock.advance(LEASE_MS);
    expect(upBeats.filter((g) => g === "gw-1")).toEqual(["gw-1"]);
    successor.stop();
    frozen.stop();

    // Alone, a thawed gateway resyncs at once, and beats again once it has listened.
    stalls.length = 0;
    const alone = sender("gw-3", 9_000);
    alone.start();
    await clock.advance(0);
    clock.jump(LEASE_MS + interval);
    await clock.advance(0);
    expect(stalls).toEqual([LEASE_MS + interval]);
    expect(upBeats.filter((g) => g === "gw-3")).toEqual(["gw-3"]);
    await clock.advance(1.5 * interval);
    expect(stalls).toEqual([LEASE_MS + interval]);
    expect(upBeats.filter((g) => g === "gw-3")).toEqual(["gw-3", "gw-3"]);
    alone.stop();
  });
});
