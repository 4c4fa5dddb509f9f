/**
 * The status API's view of a data center, built from what the bus carries: counter nodes answer
 * for themselves (one that does not answer is listed with its error, not dropped, and does not
 * fail the status), gateways are known from their heartbeats until they go down or their lease
 * runs out, remote DCs from their heartbeats; what joined, restarted and left since the gateway
 * started stays listed after it is gone. On an in-memory bus and a manual clock.
 */
import { DCS_SUBJECT, MemoryBus, gatewaysSubject, nodeSubject } from "@livecount/bus";
import { DcLiveness, Membership } from "@livecount/cluster";
import { encodeMessage, type NodeInfoReply } from "@livecount/protocol";
import { silentLogger } from "@livecount/runtime";
import { afterEach, describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { AdminApi } from "../src/admin_api.js";
import { CLUSTER_EVENT_TTL_MS, ClusterEvents, MAX_CLUSTER_EVENTS } from "../src/cluster_events.js";
import { OwnerClient } from "../src/owner_client.js";

const LEASE_MS = 3_000;
const TIMEOUT_MS = 500;

describe("gateway - status API", () => {
  const stops: Array<() => void> = [];
  afterEach(() => {
    for (const stop of stops.splice(0)) stop();
  });

  async function setUp() {
    const clock = new ManualClock(1_000_000);
    const bus = new MemoryBus({ clock });
    const member = (self?: string): Membership => {
      const m = new Membership({
        bus,
        clock,
        logger: silentLogger,
        dc: "dc1",
        partitions: 8,
        vnodes: 8,
        leaseMs: LEASE_MS,
        ...(self !== undefined ? { self } : {}),
      });
      m.start();
      stops.push(() => m.stop());
      return m;
    };
    const nodeA = member("node-a");
    const nodeB = member("node-b");
    const membership = member();
    const liveness = new DcLiveness({
      bus,
      clock,
      logger: silentLogger,
      dc: "dc1",
      leaseMs: LEASE_MS,
      heartbeatMs: 100,
    });
    liveness.start();
    stops.push(() => liveness.stop());
    // node-a answers for itself; node-b is on the ring but never answers (frozen).
    const info: NodeInfoReply = {
      type: "node_info",
      node: "node-a",
      incarnation: nodeA.incarnation,
      ready: true,
      partitions: [
        [1, 4],
        [5, 2],
      ],
      actors: 12,
      dirty: 3,
      flushLagMs: 25,
      bootstrapped: 2,
      resyncing: { dc2: 1, dc3: 0 },
      ts: clock.now(),
    };
    bus.serve(nodeSubject("dc1", "node-a"), async () => encodeMessage(info));
    bus.serve(nodeSubject("dc1", "node-b"), () => new Promise<Uint8Array>(() => {}));
    const admin = new AdminApi({
      bus,
      dc: "dc1",
      membership,
      liveness,
      owners: new OwnerClient(bus, membership, "dc1", TIMEOUT_MS),
      clock,
      logger: silentLogger,
      timeoutMs: TIMEOUT_MS,
      settleMs: LEASE_MS,
      self: () => ({ id: "gw-self", sockets: 2, viewers: 1, last_heard: clock.now() }),
    });
    admin.start();
    stops.push(() => admin.stop());
    // The nodes' next heartbeats put them on the gateway's ring.
    await clock.advance(LEASE_MS / 3);
    return { clock, bus, admin, member, nodeA, nodeB };
  }

  /** The status, with the clock run past the nodes' answer timeout. */
  async function status(clock: ManualClock, admin: AdminApi) {
    const pending = admin.status();
    await clock.advance(TIMEOUT_MS);
    return pending;
  }

  test("status - a node that answers shows its partitions and epochs; a frozen one is listed as timeout; the ring counts both", async () => {
    const { clock, admin } = await setUp();
    const s = await status(clock, admin);
    expect(s.nodes).toEqual([
      {
        id: "node-a",
        incarnation: expect.any(String),
        ready: true,
        partitions: [
          { partition: 1, epoch: 4 },
          { partition: 5, epoch: 2 },
        ],
        actors: 12,
        dirty: 3,
        flush_lag_ms: 25,
        bootstrapped: 2,
        resyncing: { dc2: 1, dc3: 0 },
      },
      { id: "node-b", error: "timeout" },
    ]);
    expect(s.ring.nodes).toEqual(["node-a", "node-b"]);
    expect(s.ring.assigned["node-a"]! + s.ring.assigned["node-b"]!).toBe(8);
    expect(s.dcs).toEqual([
      { dc: "dc1", local: true, live: true, lag_ms: 0, last_heard: clock.now() - TIMEOUT_MS },
    ]);
  });

  test("status - gateways come from their heartbeats with sockets and viewers, and leave on down or a lapsed lease; remote DCs from theirs", async () => {
    const { clock, bus, admin } = await setUp();
    const beat = (gateway: string, state: "up" | "down", sockets = 0, viewers = 0): void =>
      bus.publish(
        gatewaysSubject("dc1"),
        encodeMessage({ type: "gateway", gateway, leaseMs: LEASE_MS, state, sockets, viewers }),
      );
    beat("gw-2", "up", 7, 5);
    beat("gw-3", "up", 1, 1);
    bus.publish(DCS_SUBJECT, encodeMessage({ type: "dc", dc: "dc2", node: "n1", seq: 1, leaseMs: LEASE_MS }));
    await clock.advance(0);
    const heardAt = clock.now();
    await clock.advance(200);
    let s = await status(clock, admin);
    expect(s.gateway).toBe("gw-self");
    expect(s.gateways.map((g) => [g.id, g.sockets, g.viewers])).toEqual([
      ["gw-2", 7, 5],
      ["gw-3", 1, 1],
      ["gw-self", 2, 1],
    ]);
    expect(s.dcs[1]).toEqual({
      dc: "dc2",
      local: false,
      live: true,
      lag_ms: 200,
      last_heard: heardAt,
    });

    beat("gw-3", "down");
    await clock.advance(0);
    s = await status(clock, admin);
    expect(s.gateways.map((g) => g.id)).toEqual(["gw-2", "gw-self"]);

    // gw-2 falls silent: gone once its lease has run out; dc2 likewise goes down.
    await clock.advance(LEASE_MS);
    s = await status(clock, admin);
    expect(s.gateways.map((g) => g.id)).toEqual(["gw-self"]);
    expect(s.dcs[1]).toMatchObject({ dc: "dc2", live: false });
  });

  test("status - a silent gateway leaves the list once its lease has run out, with the wall clock stepped back a minute", async () => {
    const { clock, bus, admin } = await setUp();
    bus.publish(
      gatewaysSubject("dc1"),
      encodeMessage({ type: "gateway", gateway: "gw-2", leaseMs: LEASE_MS, state: "up" }),
    );
    await clock.advance(0);
    clock.stepWall(-60_000);
    let s = await status(clock, admin);
    expect(s.gateways.map((g) => g.id)).toEqual(["gw-2", "gw-self"]);
    await clock.advance(LEASE_MS);
    s = await status(clock, admin);
    expect(s.gateways.map((g) => g.id)).toEqual(["gw-self"]);
  });

  test("recent changes - nodes found at start did not join; later joins, restarts and leaves of nodes and gateways are listed, newest first", async () => {
    const { clock, bus, admin, member, nodeA, nodeB } = await setUp();
    const beat = (gateway: string, state: "up" | "down"): void =>
      bus.publish(
        gatewaysSubject("dc1"),
        encodeMessage({ type: "gateway", gateway, leaseMs: LEASE_MS, state }),
      );
    beat("gw-early", "up");
    // Its own heartbeats: this gateway is never listed, joined or gone, however late they come.
    beat("gw-self", "up");
    await clock.advance(0);
    let s = await status(clock, admin);
    // Everyone heard within the settle window was there already.
    expect(s.events).toEqual([]);

    await clock.advance(LEASE_MS);
    beat("gw-early", "up");
    const t0 = clock.now();
    const nodes = new Map([["node-c", member("node-c")]]);
    beat("gw-2", "up");
    await clock.advance(LEASE_MS / 3);
    const t1 = clock.now();
    nodeA.stop();
    member("node-a"); // the same id, a new incarnation
    beat("gw-2", "down");
    beat("gw-early", "up");
    await clock.advance(LEASE_MS / 3);
    s = await status(clock, admin);
    expect(s.events).toEqual([
      { at: t1, kind: "gateway", id: "gw-2", event: "left" },
      { at: expect.any(Number), kind: "node", id: "node-a", event: "restarted" },
      { at: t0, kind: "gateway", id: "gw-2", event: "joined" },
      { at: t0, kind: "node", id: "node-c", event: "joined" },
    ]);

    // node-b's process freezes; gw-early goes quiet: both past their leases.
    nodeB.stop();
    const quietFrom = clock.now();
    await clock.advance(LEASE_MS * 2);
    s = await status(clock, admin);
    expect(s.nodes.map((n) => n.id)).toEqual(["node-a", "node-c"]);
    expect(s.events.slice(0, 2)).toEqual(
      expect.arrayContaining([
        { at: expect.any(Number), kind: "node", id: "node-b", event: "silent" },
        { at: expect.any(Number), kind: "gateway", id: "gw-early", event: "silent" },
      ]),
    );
    for (const e of s.events.slice(0, 2)) expect(e.at).toBeGreaterThanOrEqual(quietFrom + LEASE_MS);
    // node-c stops as a deploy stops it: it says so, and hands its partitions over at once.
    const nodeC = nodes.get("node-c")!;
    const leftAt = clock.now();
    nodeC.leave();
    await clock.advance(0);
    s = await status(clock, admin);
    expect(s.events[0]).toEqual({ at: leftAt, kind: "node", id: "node-c", event: "left" });
    // gw-early was only frozen: heard again, the same process is back (not started).
    beat("gw-early", "up");
    await clock.advance(0);
    s = await status(clock, admin);
    expect(s.events[0]).toEqual({ at: expect.any(Number), kind: "gateway", id: "gw-early", event: "back" });
  });

  test("recent changes - a start, a return and a stop told apart: by when the process started, or by the settle window for peers that do not say", () => {
    const events = new ClusterEvents(10_000, 1_000);
    // Already running when this gateway started: found, not joined, whenever first heard.
    events.arrived(10_500, "node", "n-old", 9_000);
    events.arrived(60_000, "gateway", "g-old", 9_000);
    // Older releases say nothing: found within the settle window only.
    events.arrived(10_900, "gateway", "g-legacy", undefined);
    expect(events.recent(60_000)).toEqual([]);
    events.arrived(11_000, "gateway", "g-legacy-late", undefined);
    events.arrived(12_000, "node", "n-new", 11_500);
    // Frozen past its lease, then heard again: the same process is back.
    events.departed(13_000, "gateway", "g-old", "silent");
    events.arrived(14_000, "gateway", "g-old", 9_000);
    // Stopped, then started again under the same id: a new process joined.
    events.departed(15_000, "node", "n-new", "left");
    events.arrived(16_000, "node", "n-new", 15_500);
    expect(events.recent(60_000).map((e) => `${e.kind} ${e.id} ${e.event}`)).toEqual([
      "node n-new joined",
      "node n-new left",
      "gateway g-old back",
      "gateway g-old silent",
      "node n-new joined",
      "gateway g-legacy-late joined",
    ]);
  });

  test("recent changes - keeps the last 50 and none older than an hour", () => {
    const events = new ClusterEvents(0, 1_000);
    for (let i = 0; i < MAX_CLUSTER_EVENTS + 5; i++)
      events.departed(2_000 + i, "gateway", `gw-${i}`, "silent");
    const listed = events.recent(3_000);
    expect(listed).toHaveLength(MAX_CLUSTER_EVENTS);
    expect(listed[0]!.id).toBe(`gw-${MAX_CLUSTER_EVENTS + 4}`);
    expect(listed.at(-1)!.id).toBe("gw-5");
    events.departed(2_000 + CLUSTER_EVENT_TTL_MS + 30, "node", "late", "left");
    expect(events.recent(2_000 + CLUSTER_EVENT_TTL_MS + 30).map((e) => e.id)).toEqual([
      "late",
      // 30 ms past the hour: those of 2,000 to 2,029 ms are gone.
      ...Array.from(
        { length: MAX_CLUSTER_EVENTS + 4 - 30 + 1 },
        (_, i) => `gw-${MAX_CLUSTER_EVENTS + 4 - i}`,
      ),
    ]);
  });
});
