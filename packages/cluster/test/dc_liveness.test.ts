import { DCS_SUBJECT, MemoryBus } from "@livecount/bus";
import { decodeMessage, encodeMessage, type DcHeartbeat } from "@livecount/protocol";
import type { Clock } from "@livecount/runtime";
import { afterEach, describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import type { BusHealth } from "../src/bus_pulse.js";
import { DcLiveness, NODE_MEMORY_MS, type DcEvent } from "../src/dc_liveness.js";
import { ERROR, INFO, WARN, logLines } from "./log_lines.js";

const HEARTBEAT_MS = 100;
const LEASE_MS = 1_000;

describe("cluster - data center liveness", () => {
  let bus: MemoryBus;
  let liveness: DcLiveness;
  afterEach(async () => {
    liveness.stop();
    await bus.close();
  });

  function setUp(options: { announceAs?: string; clock?: Clock; silence?: BusHealth } = {}) {
    const manual = new ManualClock();
    const clock = options.clock ?? manual;
    bus = new MemoryBus({ clock: manual });
    const { logger, lines } = logLines();
    liveness = new DcLiveness({
      bus,
      clock,
      logger,
      dc: "dc1",
      leaseMs: 5_000,
      heartbeatMs: HEARTBEAT_MS,
      ...(options.announceAs !== undefined ? { announceAs: options.announceAs } : {}),
      ...(options.silence !== undefined
        ? { silence: { health: options.silence, silenceMs: 2 * HEARTBEAT_MS } }
        : {}),
    });
    const events: Array<[string, DcEvent["kind"]]> = [];
    liveness.onChange((dc, event) => events.push([dc, event.kind]));
    liveness.start();
    /** A heartbeat of a remote DC's node, delivered. */
    const hear = async (dc: string, node: string, seq: number, leaseMs = LEASE_MS): Promise<void> => {
      bus.publish(DCS_SUBJECT, encodeMessage({ type: "dc", dc, node, seq, leaseMs }));
      await bus.flush();
    };
    return { clock: manual, events, lines, hear };
  }

  test("cluster - only this DC is live before any other is heard", () => {
    setUp();
    expect(liveness.localDc).toBe("dc1");
    expect(liveness.isLive("dc1")).toBe(true);
    expect(liveness.isLive("dc2")).toBe(false);
    expect(liveness.hasRemotes).toBe(false);
    expect(liveness.liveRemotes()).toEqual([]);
    expect(liveness.lagMs("dc1")).toBe(0);
    expect(liveness.lagMs("dc2")).toBe(Infinity);
  });

  test("cluster - a DC heard is up; silent for longer than the lease it announced, down; heard again, up", async () => {
    const { clock, events, lines, hear } = setUp();
    await hear("dc2", "n1", 1);
    expect(events).toEqual([["dc2", "up"]]);
    expect(liveness.isLive("dc2")).toBe(true);
    expect(liveness.hasRemotes).toBe(true);
    expect(liveness.liveRemotes()).toEqual(["dc2"]);
    expect(lines.at(-1)).toMatchObject({ level: INFO, msg: "data center up", dc: "dc2" });

    // Exactly a lease of silence is still within it.
    await clock.advance(LEASE_MS);
    expect(liveness.lagMs("dc2")).toBe(LEASE_MS);
    expect(liveness.isLive("dc2")).toBe(true);
    await clock.advance(HEARTBEAT_MS);
    expect(liveness.isLive("dc2")).toBe(false);
    expect(liveness.liveRemotes()).toEqual([]);
    expect(liveness.hasRemotes).toBe(true);
    expect(events).toEqual([
      ["dc2", "up"],
      ["dc2", "down"],
    ]);
    expect(lines.at(-1)).toMatchObject({ level: WARN, msg: "data center down", dc: "dc2", silentMs: 1_100 });

    // Down is reported once, however long the silence.
    await clock.advance(10 * LEASE_MS);
    expect(events).toHaveLength(2);

    await hear("dc2", "n1", 2);
    expect(liveness.isLive("dc2")).toBe(true);
    expect(liveness.lagMs("dc2")).toBe(0);
    expect(events.at(-1)).toEqual(["dc2", "up"]);
    expect(lines.at(-1)).toMatchObject({ level: INFO, msg: "data center up again", dc: "dc2" });
  });

  test.each([-60_000, 60_000])(
    "cluster - a silent DC goes down a lease after it was last heard with the wall clock stepped %i ms; its last hearing is reported in wall time",
    async (stepMs) => {
      const { clock, events, hear } = setUp();
      await hear("dc2", "n1", 1);
      const heardAt = clock.now();
      clock.stepWall(stepMs);
      // The wall time of the hearing moved with the wall clock it is read on.
      expect(liveness.remotes()).toEqual([{ dc: "dc2", live: true, lastHeard: heardAt + stepMs }]);
      await clock.advance(LEASE_MS);
      expect(liveness.isLive("dc2")).toBe(true);
      expect(liveness.lagMs("dc2")).toBe(LEASE_MS);
      await clock.advance(HEARTBEAT_MS);
      expect(liveness.isLive("dc2")).toBe(false);
      expect(events).toEqual([
        ["dc2", "up"],
        ["dc2", "down"],
      ]);
    },
  );

  test("cluster - while the bus is silent no DC goes down; after, each keeps the part of its lease the silence left", async () => {
    // The broker's answers: at once while the bus carries; none since `since` while it is silent.
    let since: number | undefined;
    const made: { clock?: ManualClock } = {};
    const health: BusHealth = {
      get heardAt() {
        return since ?? made.clock?.monotonic() ?? 0;
      },
      get unansweredSince() {
        return since;
      },
      delivered: () => {},
    };
    const { clock, events, lines, hear } = setUp({ silence: health });
    made.clock = clock;
    await hear("dc2", "n1", 1);
    await hear("dc3", "n1", 1);
    // Half a lease passes for dc3 before the silence; dc2 is heard just as it starts.
    await clock.advance(LEASE_MS / 2);
    await hear("dc2", "n1", 2);
    const dc2HeardAt = clock.now();
    since = clock.monotonic();
    await clock.advance(LEASE_MS * 5);
    expect(liveness.liveRemotes()).toEqual(["dc2", "dc3"]);
    expect(lines.some((l) => l.msg === "nothing comes on the bus; data centers keep their leases")).toBe(
      true,
    );
    // The bus carries again; neither DC is heard from then on.
    since = undefined;
    const backAt = clock.now();
    // dc3 had half its lease left, dc2 its whole lease, from the first answer (the next check), and
    // a DC goes down once more than its lease has passed (the check after).
    await clock.advance(LEASE_MS / 2 - HEARTBEAT_MS);
    expect(liveness.liveRemotes()).toEqual(["dc2", "dc3"]);
    await clock.advance(3 * HEARTBEAT_MS);
    expect(liveness.liveRemotes()).toEqual(["dc2"]);
    await clock.advance(LEASE_MS / 2);
    expect(liveness.liveRemotes()).toEqual([]);
    expect(clock.now() - backAt).toBeLessThanOrEqual(LEASE_MS + 2 * HEARTBEAT_MS);
    // What is reported stays when they were really last heard.
    expect(liveness.lagMs("dc2")).toBe(clock.now() - dc2HeardAt);
    expect(events).toEqual([
      ["dc2", "up"],
      ["dc3", "up"],
      ["dc3", "down"],
      ["dc2", "down"],
    ]);
  });

  test("cluster - round trips answered late while messages keep coming are no silence: a dead DC goes down on time, and lag stays the truth", async () => {
    // Every round trip overdue (a process too busy to read its answers), yet the bus delivers.
    const made: { clock?: ManualClock } = {};
    let heardAt = 0;
    const health: BusHealth = {
      get heardAt() {
        return heardAt;
      },
      unansweredSince: 0,
      delivered: () => void (heardAt = made.clock!.monotonic()),
    };
    const { clock, events, hear } = setUp({ silence: health });
    made.clock = clock;
    heardAt = clock.monotonic();
    await hear("dc2", "n1", 1);
    const heardDc2At = clock.now();
    // dc3 keeps beating; dc2 is dead.
    for (let seq = 1; clock.now() - heardDc2At <= LEASE_MS + HEARTBEAT_MS; seq++) {
      await hear("dc3", "n1", seq);
      await clock.advance(HEARTBEAT_MS);
    }
    expect(events).toEqual([
      ["dc2", "up"],
      ["dc3", "up"],
      ["dc2", "down"],
    ]);
    expect(liveness.lagMs("dc2")).toBe(clock.now() - heardDc2At);
  });

  test("cluster - other messages from a live DC keep it live; they never bring one up", async () => {
    const { clock, events, hear } = setUp();
    liveness.heard("dc2");
    expect(liveness.isLive("dc2")).toBe(false);
    await hear("dc2", "n1", 1);
    // Heartbeats silent (queued behind a transfer), its entries arriving: live past its lease.
    for (let t = 0; t < 3 * LEASE_MS; t += LEASE_MS / 2) {
      await clock.advance(LEASE_MS / 2);
      liveness.heard("dc2");
    }
    expect(liveness.isLive("dc2")).toBe(true);
    expect(liveness.lagMs("dc2")).toBe(0);
    // Silent in every way: down after its lease, and entries arriving late do not bring it back.
    await clock.advance(LEASE_MS + HEARTBEAT_MS);
    expect(liveness.isLive("dc2")).toBe(false);
    liveness.heard("dc2");
    expect(liveness.isLive("dc2")).toBe(false);
    expect(events).toEqual([
      ["dc2", "up"],
      ["dc2", "down"],
    ]);
    await hear("dc2", "n1", 2);
    expect(events.at(-1)).toEqual(["dc2", "up"]);
  });

  test("cluster - a DC's lease is the one its latest heartbeat announced", async () => {
    const { clock, hear } = setUp();
    await hear("dc2", "n1", 1, 10 * LEASE_MS);
    await clock.advance(5 * LEASE_MS);
    expect(liveness.isLive("dc2")).toBe(true);
    await hear("dc2", "n1", 2, LEASE_MS);
    await clock.advance(LEASE_MS + HEARTBEAT_MS);
    expect(liveness.isLive("dc2")).toBe(false);
  });

  test("cluster - the longest lease is this DC's or the longest a remote announced, down or not", async () => {
    const { clock, hear } = setUp();
    expect(liveness.longestLeaseMs(), "this DC's, before any other is heard").toBe(5_000);
    await hear("dc2", "n1", 1, 2 * LEASE_MS);
    expect(liveness.longestLeaseMs(), "dc2's is shorter").toBe(5_000);
    await hear("dc3", "n1", 1, 8 * LEASE_MS);
    expect(liveness.longestLeaseMs()).toBe(8 * LEASE_MS);
    await clock.advance(9 * LEASE_MS);
    expect(liveness.isLive("dc3"), "dc3 down").toBe(false);
    expect(liveness.longestLeaseMs(), "its lease still counts: it may be cut off, not gone").toBe(
      8 * LEASE_MS,
    );
    await hear("dc3", "n1", 2, 6 * LEASE_MS);
    expect(liveness.longestLeaseMs(), "the lease its latest heartbeat announced").toBe(6 * LEASE_MS);
  });

  test("cluster - what a DC's nodes heard within its lease say of keys: all acknowledge, all take none, or unknown", async () => {
    const { clock } = setUp();
    const say = async (dc: string, node: string, seq: number, acksKeys?: boolean): Promise<void> => {
      const beat: DcHeartbeat = { type: "dc", dc, node, seq, leaseMs: LEASE_MS };
      bus.publish(DCS_SUBJECT, encodeMessage(acksKeys === undefined ? beat : { ...beat, acksKeys }));
      await bus.flush();
    };
    expect(liveness.keysTaken("dc2"), "never heard").toBe("unknown");
    await say("dc2", "b1", 1, true);
    expect(liveness.keysTaken("dc2")).toBe("acks");
    await say("dc2", "b2", 1);
    expect(liveness.keysTaken("dc2"), "b2 of an older release").toBe("unknown");
    await clock.advance(LEASE_MS / 2);
    await say("dc2", "b1", 2, true);
    await clock.advance(LEASE_MS / 2 + 1);
    await say("dc2", "b1", 3, true);
    expect(liveness.keysTaken("dc2"), "b2 not heard for the lease").toBe("acks");
    await clock.advance(3 * LEASE_MS);
    expect(liveness.isLive("dc2")).toBe(false);
    expect(liveness.keysTaken("dc2"), "silent, down: what it said last").toBe("acks");
    await say("dc3", "c1", 1, false);
    expect(liveness.keysTaken("dc3")).toBe("off");
    await say("dc3", "c2", 1, true);
    expect(liveness.keysTaken("dc3"), "they disagree").toBe("unknown");

    const beats: DcHeartbeat[] = [];
    bus.subscribe(DCS_SUBJECT, (data) => {
      const msg = decodeMessage(data);
      if (msg.type === "dc" && msg.dc === "dc1") beats.push(msg);
    });
    const acking = new DcLiveness({
      ...{ bus, clock, logger: logLines().logger, dc: "dc1", leaseMs: LEASE_MS, heartbeatMs: HEARTBEAT_MS },
      announceAs: "n1",
      acksKeys: true,
    });
    acking.start();
    await bus.flush();
    acking.stop();
    expect(beats.map((b) => b.acksKeys)).toEqual([true]);
  });

  test("cluster - a skipped heartbeat number from a live DC is a gap; a restarted node's fresh numbers are not", async () => {
    const { events, lines, hear } = setUp();
    await hear("dc2", "n1", 1);
    await hear("dc2", "n1", 2);
    expect(events).toEqual([["dc2", "up"]]);
    await hear("dc2", "n1", 5);
    expect(events).toEqual([
      ["dc2", "up"],
      ["dc2", "gap"],
    ]);
    expect(lines.at(-1)).toMatchObject({
      level: WARN,
      msg: "heartbeats from data center lost",
      dc: "dc2",
      node: "n1",
      missed: 2,
    });
    // The number in a DC's very first heartbeat counts.
    await hear("dc3", "n1", 1);
    await hear("dc3", "n1", 3);
    expect(events.slice(2)).toEqual([
      ["dc3", "up"],
      ["dc3", "gap"],
    ]);
    events.splice(2);
    // So does the first number heard from another node of a known DC.
    await hear("dc2", "n3", 1);
    await hear("dc2", "n3", 3);
    expect(events.at(-1)).toEqual(["dc2", "gap"]);
    events.splice(2);
    // n1 restarted: it counts from 1 again.
    await hear("dc2", "n1", 1);
    await hear("dc2", "n1", 2);
    // Another node of the same DC has numbers of its own.
    await hear("dc2", "n2", 40);
    await hear("dc2", "n2", 41);
    expect(events).toHaveLength(2);
    await hear("dc2", "n2", 43);
    expect(events.at(-1)).toEqual(["dc2", "gap"]);
  });

  test("cluster - a node's number is kept while its DC is heard within NODE_MEMORY_MS of it, then forgotten for a new id", async () => {
    const { clock, events, hear } = setUp();
    await hear("dc2", "old", 1);
    await hear("dc2", "mate", 1);
    /** `ms` of dc2 heard from its node "mate" alone, within the lease throughout. */
    let mateSeq = 1;
    const mateAlone = async (ms: number): Promise<void> => {
      for (let passed = 0; passed < ms; passed += LEASE_MS / 2) {
        await clock.advance(LEASE_MS / 2);
        await hear("dc2", "mate", ++mateSeq);
      }
    };
    // A new id just inside the memory keeps "old": back with a jump, that is a gap.
    await mateAlone(NODE_MEMORY_MS - LEASE_MS);
    await hear("dc2", "restarted-1", 1);
    await hear("dc2", "old", 3);
    expect(events).toEqual([
      ["dc2", "up"],
      ["dc2", "gap"],
    ]);
    // Past the memory, the next new id makes room: "old" back with a jump is a fresh node, no gap.
    await mateAlone(NODE_MEMORY_MS + LEASE_MS);
    await hear("dc2", "restarted-2", 1);
    await hear("dc2", "old", 9);
    expect(events).toHaveLength(2);
    // The mate, heard throughout, was kept.
    await hear("dc2", "mate", mateSeq + 2);
    expect(events.at(-1)).toEqual(["dc2", "gap"]);
    expect(events).toHaveLength(3);
  });

  test("cluster - a whole DC silent past NODE_MEMORY_MS forgets none of its nodes: back with a jump, a gap or up", async () => {
    const { clock, events, hear } = setUp();
    await hear("dc2", "n1", 1);
    await hear("dc2", "n2", 1);
    await clock.advance(2 * NODE_MEMORY_MS);
    expect(events.at(-1)).toEqual(["dc2", "down"]);
    // Back with a new node first: n1 and n2 were heard when dc2 last was, so both are kept.
    await hear("dc2", "n3", 1);
    expect(events.at(-1)).toEqual(["dc2", "up"]);
    await hear("dc2", "n1", 5);
    expect(events.at(-1)).toEqual(["dc2", "gap"]);
    await hear("dc2", "n2", 5);
    expect(events.filter(([, kind]) => kind === "gap")).toHaveLength(2);
  });

  test("cluster - this DC's own heartbeats, other messages and garbage change nothing", async () => {
    const { events, lines, hear } = setUp();
    await hear("dc1", "n9", 1);
    bus.publish(
      DCS_SUBJECT,
      encodeMessage({ type: "node", node: "n", incarnation: "i", leaseMs: 1, state: "up" }),
    );
    bus.publish(DCS_SUBJECT, new Uint8Array([0xc1]));
    await bus.flush();
    expect(events).toEqual([]);
    expect(liveness.hasRemotes).toBe(false);
    expect(lines.at(-1)).toMatchObject({
      level: WARN,
      msg: "malformed dc message",
      err: expect.objectContaining({ type: "ProtocolError" }),
    });
  });

  test("cluster - a counter node announces its DC every heartbeat period with growing numbers; a gateway does not", async () => {
    const { clock } = setUp({ announceAs: "n1" });
    const beats: DcHeartbeat[] = [];
    bus.subscribe(DCS_SUBJECT, (data) => {
      const msg = decodeMessage(data);
      if (msg.type === "dc") beats.push(msg);
    });
    await clock.advance(3 * HEARTBEAT_MS);
    // Beat 1 went out on start, before this subscription.
    expect(beats).toEqual(
      [2, 3, 4].map((seq) => ({ type: "dc", dc: "dc1", node: "n1", seq, leaseMs: 5_000 })),
    );
    liveness.stop();
    await clock.advance(3 * HEARTBEAT_MS);
    expect(beats).toHaveLength(3);

    const quiet = new DcLiveness({
      bus,
      clock,
      logger: logLines().logger,
      dc: "dc1",
      leaseMs: 5_000,
      heartbeatMs: HEARTBEAT_MS,
    });
    quiet.start();
    await clock.advance(3 * HEARTBEAT_MS);
    quiet.stop();
    expect(beats).toHaveLength(3);
  });

  test("cluster - a stopped liveness neither hears nor expires anyone", async () => {
    const { clock, events, hear } = setUp();
    await hear("dc2", "n1", 1);
    liveness.stop();
    await clock.advance(10 * LEASE_MS);
    await hear("dc3", "n1", 1);
    expect(events).toEqual([["dc2", "up"]]);
    expect(liveness.isLive("dc2")).toBe(true);
  });

  test("cluster - a listener that throws is logged and the others still hear; one that left hears nothing", async () => {
    const { lines, hear } = setUp();
    liveness.onChange(() => {
      throw new Error("listener broke");
    });
    const late: string[] = [];
    const leave = liveness.onChange((dc) => late.push(dc));
    await hear("dc2", "n1", 1);
    expect(late).toEqual(["dc2"]);
    expect(lines.find((l) => l.level === ERROR)).toMatchObject({ msg: "dc listener failed", dc: "dc2" });
    leave();
    await hear("dc3", "n1", 1);
    expect(late).toEqual(["dc2"]);
  });

  test("cluster - a lag is never negative, even when the clock steps back", async () => {
    let skewMs = 0;
    const manual = new ManualClock();
    const skewed: Clock = {
      now: () => manual.now() + skewMs,
      monotonic: () => manual.monotonic(),
      setTimeout: (fn, ms) => manual.setTimeout(fn, ms),
      clearTimeout: (handle) => manual.clearTimeout(handle),
      defer: (fn) => manual.defer(fn),
    };
    const { hear } = setUp({ clock: skewed });
    await hear("dc2", "n1", 1);
    skewMs = -5_000;
    expect(liveness.lagMs("dc2")).toBe(0);
  });

  test("cluster - stopping a liveness that never started is harmless", () => {
    bus = new MemoryBus({ clock: new ManualClock() });
    liveness = new DcLiveness({
      bus,
      clock: new ManualClock(),
      logger: logLines().logger,
      dc: "dc1",
      leaseMs: 5_000,
      heartbeatMs: HEARTBEAT_MS,
    });
    expect(() => liveness.stop()).not.toThrow();
  });
});
