import { MemoryBus, nodesSubject } from "@livecount/bus";
import { decodeMessage, encodeMessage, type NodeHeartbeat } from "@livecount/protocol";
import { HashRing } from "@livecount/ring";
import { afterEach, describe, expect, test } from "vitest";
import { ForwardingBus } from "../../../test/support/forwarding_bus.js";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { Membership } from "../src/membership.js";
import { ERROR, INFO, WARN, logLines } from "./log_lines.js";

const LEASE_MS = 3_000;
/** Heartbeats go out every third of the lease. */
const BEAT_MS = LEASE_MS / 3;
const PARTITIONS = 16;
const VNODES = 8;

interface Change {
  readonly nodes: readonly string[];
  readonly previous: readonly string[];
  readonly restarted: readonly string[];
}

describe("cluster - membership", () => {
  let bus: MemoryBus;
  const started: Membership[] = [];
  afterEach(async () => {
    for (const m of started.splice(0)) m.stop();
    await bus.close();
  });

  function setUp() {
    const clock = new ManualClock();
    bus = new MemoryBus({ clock });
    const { logger, lines } = logLines();
    const join = (self?: string) => {
      const m = new Membership({
        bus,
        clock,
        logger,
        dc: "dc1",
        partitions: PARTITIONS,
        vnodes: VNODES,
        leaseMs: LEASE_MS,
        ...(self !== undefined ? { self } : {}),
      });
      const changes: Change[] = [];
      m.onChange((ring, previous, restarted) =>
        changes.push({ nodes: ring.nodes, previous: previous.nodes, restarted: [...restarted] }),
      );
      m.start();
      started.push(m);
      return { m, changes };
    };
    const beats: NodeHeartbeat[] = [];
    /** Every message on the subject, well-formed or not. */
    const sent: Uint8Array[] = [];
    bus.subscribe(nodesSubject("dc1"), (data) => {
      sent.push(data);
      const msg = decodeMessage(data);
      if (msg.type === "node") beats.push(msg);
    });
    /** A heartbeat from a node, delivered. */
    const hear = async (
      node: string,
      incarnation: string,
      state: "up" | "leaving" = "up",
      reconnects?: number,
    ) => {
      const extra = reconnects !== undefined ? { reconnects } : {};
      bus.publish(
        nodesSubject("dc1"),
        encodeMessage({ type: "node", node, incarnation, leaseMs: LEASE_MS, state, ...extra }),
      );
      await bus.flush();
    };
    return { clock, lines, join, beats, sent, hear };
  }

  test("cluster - every process builds the same ring from the counter nodes' heartbeats", async () => {
    const { clock, join } = setUp();
    const a = join("n-a");
    const b = join("n-b");
    const gateway = join();
    // Each hears the others at their next beat.
    await clock.advance(BEAT_MS);
    const expected = new HashRing(["n-a", "n-b"], { partitions: PARTITIONS, vnodes: VNODES });
    for (const { m } of [a, b, gateway]) {
      expect(m.ring.equals(expected)).toBe(true);
      expect(m.ring.partitionCount).toBe(PARTITIONS);
      expect(m.ring.vnodes).toBe(VNODES);
    }
  });

  test("cluster - a node is on its own ring from the start; a gateway's ring starts empty", () => {
    const { join } = setUp();
    const node = join("n-a");
    expect(node.m.ring.nodes).toEqual(["n-a"]);
    expect(node.changes).toEqual([{ nodes: ["n-a"], previous: [], restarted: [] }]);
    const gateway = join();
    expect(gateway.m.ring.nodes).toEqual([]);
    expect(gateway.changes).toEqual([]);
  });

  test("cluster - a counter node beats every third of its lease with its incarnation and start; a gateway never beats", async () => {
    const { clock, join, beats, sent } = setUp();
    const { m: gateway } = join();
    await clock.advance(LEASE_MS);
    expect(sent).toEqual([]);
    const startedAt = clock.now();
    const { m } = join("n-a");
    await clock.advance(BEAT_MS - 1);
    expect(beats).toEqual([
      { type: "node", node: "n-a", incarnation: m.incarnation, leaseMs: LEASE_MS, state: "up", startedAt },
    ]);
    expect(gateway.startedAt("n-a")).toBe(startedAt);
    await clock.advance(1);
    expect(beats).toHaveLength(2);
    m.stop();
    await clock.advance(LEASE_MS);
    expect(beats).toHaveLength(2);
  });

  test("cluster - a silent node leaves the ring once its lease has passed, never before", async () => {
    const { clock, join, hear } = setUp();
    const { m, changes } = join("n-a");
    await hear("n-b", "b1");
    expect(m.ring.nodes).toEqual(["n-a", "n-b"]);
    // Sweeps run every BEAT_MS; the one at exactly LEASE_MS finds n-b just within its lease.
    await clock.advance(LEASE_MS);
    expect(m.ring.nodes).toEqual(["n-a", "n-b"]);
    await clock.advance(BEAT_MS);
    expect(m.ring.nodes).toEqual(["n-a"]);
    expect(changes.at(-1)).toEqual({ nodes: ["n-a"], previous: ["n-a", "n-b"], restarted: [] });
    // The node itself never expires from its own ring, however long it runs.
    await clock.advance(10 * LEASE_MS);
    expect(m.ring.nodes).toEqual(["n-a"]);
  });

  test("cluster - a node heard under a new incarnation restarted: listeners hear it even though the ring is the same", async () => {
    const { join, hear, lines } = setUp();
    const { m, changes } = join("n-a");
    await hear("n-b", "b1");
    const before = changes.length;
    await hear("n-b", "b1");
    expect(changes).toHaveLength(before);
    await hear("n-b", "b2");
    expect(changes).toHaveLength(before + 1);
    expect(changes.at(-1)).toEqual({ nodes: ["n-a", "n-b"], previous: ["n-a", "n-b"], restarted: ["n-b"] });
    expect(m.ring.nodes).toEqual(["n-a", "n-b"]);
    expect(lines.at(-1)).toMatchObject({
      level: INFO,
      msg: "ring changed",
      nodes: ["n-a", "n-b"],
      restarted: ["n-b"],
    });
  });

  test("cluster - a node that says it is leaving is dropped at once, and comes back as new", async () => {
    const { join, hear } = setUp();
    const { m, changes } = join("n-a");
    await hear("n-b", "b1");
    await hear("n-b", "b1", "leaving");
    expect(m.ring.nodes).toEqual(["n-a"]);
    // Its incarnation was forgotten with it: coming back is a join, not a restart.
    await hear("n-b", "b2");
    expect(changes.at(-1)).toEqual({ nodes: ["n-a", "n-b"], previous: ["n-a"], restarted: [] });
  });

  test("cluster - a leaving node announces it, leaves its own ring and ignores its own late heartbeats", async () => {
    const { clock, join, beats, hear } = setUp();
    const a = join("n-a");
    const b = join("n-b");
    await clock.advance(BEAT_MS);
    expect(b.m.ring.nodes).toEqual(["n-a", "n-b"]);
    a.m.leave();
    expect(a.m.ring.nodes).toEqual(["n-b"]);
    await bus.flush();
    const lastOfA = () => beats.filter((beat) => beat.node === "n-a").at(-1);
    expect(lastOfA()).toMatchObject({ state: "leaving" });
    expect(b.m.ring.nodes).toEqual(["n-b"]);
    await hear("n-a", a.m.incarnation);
    expect(a.m.ring.nodes).toEqual(["n-b"]);
    // Until it stops, its beats keep saying it is leaving.
    await clock.advance(BEAT_MS);
    expect(lastOfA()).toMatchObject({ state: "leaving" });
    expect(b.m.ring.nodes).toEqual(["n-b"]);
  });

  test("cluster - a renewed incarnation is announced at once and looks like a restart to peers", async () => {
    const { clock, join, beats } = setUp();
    const a = join("n-a");
    const b = join("n-b");
    await clock.advance(BEAT_MS);
    const first = a.m.incarnation;
    a.m.renewIncarnation();
    expect(a.m.incarnation).not.toBe(first);
    await bus.flush();
    expect(beats.at(-1)).toMatchObject({ node: "n-a", incarnation: a.m.incarnation, state: "up" });
    expect(b.changes.at(-1)).toEqual({ nodes: ["n-a", "n-b"], previous: ["n-a", "n-b"], restarted: ["n-a"] });
  });

  test("cluster - a node's reconnected bus is announced at once, its incarnation kept, and peers hear of it once per reconnect: never from a late heartbeat, a restart or its own", async () => {
    const { clock, join, beats, hear } = setUp();
    const a = join("n-a");
    const b = join("n-b");
    const heard: string[] = [];
    b.m.onReconnect((node) => heard.push(node));
    a.m.onReconnect((node) => heard.push(`self:${node}`));
    await clock.advance(BEAT_MS);
    const incarnation = a.m.incarnation;
    const changes = b.changes.length;
    a.m.reconnected();
    await bus.flush();
    expect(beats.at(-1)).toMatchObject({ node: "n-a", incarnation, reconnects: 1, state: "up" });
    expect(heard).toEqual(["n-a"]);
    // The regular beats repeat the count: nothing new.
    await clock.advance(BEAT_MS * 2);
    expect(heard).toEqual(["n-a"]);
    // A heartbeat the bus held and delivered late (a thawed server) carries less: nothing.
    await hear("n-a", incarnation);
    await hear("n-a", incarnation, "up", 1);
    expect(heard).toEqual(["n-a"]);
    a.m.reconnected();
    await bus.flush();
    expect(heard).toEqual(["n-a", "n-a"]);
    expect(b.changes).toHaveLength(changes);
    // A restart starts its count anew: a restart is heard as one (restarted), not as a reconnect.
    await hear("n-a", "a-restarted", "up", 1);
    expect(heard).toEqual(["n-a", "n-a"]);
    expect(b.changes.at(-1)?.restarted).toEqual(["n-a"]);
    await hear("n-a", "a-restarted", "up", 2);
    expect(heard).toEqual(["n-a", "n-a", "n-a"]);
  });

  test("cluster - a node forgotten for its silence and heard again with its incarnation is heard of as come back; a new incarnation is a restart, a node never heard before neither", async () => {
    const { clock, join, hear } = setUp();
    const b = join("n-b");
    const heard: string[] = [];
    b.m.onReconnect((node) => heard.push(node));
    await hear("n-a", "a-1");
    await hear("n-c", "c-1");
    expect(heard).toEqual([]);
    // Silent past the lease: forgotten.
    await clock.advance(LEASE_MS + BEAT_MS);
    expect(b.m.ring.nodes).toEqual(["n-b"]);
    await hear("n-a", "a-1");
    expect(heard).toEqual(["n-a"]);
    expect(b.m.ring.nodes).toEqual(["n-a", "n-b"]);
    // Heard as usual afterwards: nothing more.
    await hear("n-a", "a-1");
    expect(heard).toEqual(["n-a"]);
    // Forgotten, then back as a new process: a node new to the ring, not one come back.
    await clock.advance(LEASE_MS + BEAT_MS);
    await hear("n-c", "c-2");
    expect(heard).toEqual(["n-a"]);
  });

  test("cluster - a node withdrawn says leaving in every heartbeat until it rejoins: its peers drop it at once, and take it back when it does", async () => {
    const { clock, join, beats } = setUp();
    const a = join("n-a");
    const b = join("n-b");
    await clock.advance(BEAT_MS);
    expect(b.m.ring.nodes).toEqual(["n-a", "n-b"]);
    a.m.withdraw();
    await bus.flush();
    expect(b.m.ring.nodes).toEqual(["n-b"]);
    await clock.advance(2 * BEAT_MS);
    expect(beats.filter((x) => x.node === "n-a").at(-1)?.state).toBe("leaving");
    expect(b.m.ring.nodes).toEqual(["n-b"]);
    a.m.rejoin();
    await bus.flush();
    expect(beats.filter((x) => x.node === "n-a").at(-1)?.state).toBe("up");
    expect(b.m.ring.nodes).toEqual(["n-a", "n-b"]);
  });

  test("cluster - garbage and other messages on the nodes subject change nothing", async () => {
    const { join, lines } = setUp();
    const { m, changes } = join("n-a");
    const before = changes.length;
    bus.publish(nodesSubject("dc1"), new Uint8Array([0xc1]));
    bus.publish(nodesSubject("dc1"), encodeMessage({ type: "dc", dc: "dc2", node: "x", seq: 1, leaseMs: 1 }));
    await bus.flush();
    expect(changes).toHaveLength(before);
    expect(m.ring.nodes).toEqual(["n-a"]);
    expect(lines.find((l) => l.level === WARN)).toMatchObject({
      msg: "malformed node heartbeat",
      err: expect.objectContaining({ type: "ProtocolError" }),
    });
  });

  test("cluster - a listener that unsubscribed hears no more changes", async () => {
    const { join, hear } = setUp();
    const { m } = join("n-a");
    const heard: string[][] = [];
    const leave = m.onChange((ring) => heard.push([...ring.nodes]));
    await hear("n-b", "b1");
    leave();
    await hear("n-c", "c1");
    expect(heard).toEqual([["n-a", "n-b"]]);
    expect(m.ring.nodes).toEqual(["n-a", "n-b", "n-c"]);
  });

  test("cluster - a leaving node still follows the others' heartbeats while it hands over", async () => {
    const { join, hear } = setUp();
    const { m } = join("n-a");
    m.leave();
    await hear("n-b", "b1");
    expect(m.ring.nodes).toEqual(["n-b"]);
  });

  test("cluster - a node that never hears its own heartbeats (NATS noEcho) stays on its own ring", async () => {
    const clock = new ManualClock();
    bus = new MemoryBus({ clock });
    // Its heartbeats go out and never come back to it.
    const noEcho = new (class extends ForwardingBus {
      override publish(): void {}
    })(bus);
    const m = new Membership({
      bus: noEcho,
      clock,
      logger: logLines().logger,
      dc: "dc1",
      partitions: PARTITIONS,
      vnodes: VNODES,
      leaseMs: LEASE_MS,
      self: "n-a",
    });
    m.start();
    started.push(m);
    await clock.advance(10 * LEASE_MS);
    expect(m.ring.nodes).toEqual(["n-a"]);
  });

  describe("another live process under this node's id", () => {
    /** A heartbeat of `n-a` from another process, started at `startedAt`. */
    const twin = async (startedAt: number, incarnation = "twin", state: "up" | "leaving" = "up") => {
      bus.publish(
        nodesSubject("dc1"),
        encodeMessage({ type: "node", node: "n-a", incarnation, leaseMs: LEASE_MS, state, startedAt }),
      );
      await bus.flush();
    };

    test("cluster - one started later supersedes this one, once; it never stands for this one on the ring", async () => {
      const { clock, join, hear } = setUp();
      const { m, changes } = join("n-a");
      const superseded: unknown[] = [];
      m.onSuperseded((by) => superseded.push(by));
      await hear("n-b", "b1");
      const before = changes.length;
      await twin(clock.now() + 1, "later");
      await twin(clock.now() + 1, "later");
      expect(superseded).toEqual([{ incarnation: "later", startedAt: clock.now() + 1 }]);
      // Not a restart of n-a as far as this process is concerned: no ring change, no listener.
      expect(changes).toHaveLength(before);
      expect(m.ring.nodes).toEqual(["n-a", "n-b"]);
    });

    test("cluster - one started earlier is logged as an error, at most once per interval, and changes nothing here", async () => {
      const { clock, join, lines } = setUp();
      const { m, changes } = join("n-a");
      const superseded: unknown[] = [];
      m.onSuperseded((by) => superseded.push(by));
      const before = changes.length;
      const startedAt = clock.now();
      await clock.advance(BEAT_MS);
      await twin(startedAt - 1, "earlier");
      await twin(startedAt - 1, "earlier");
      const errors = () => lines.filter((l) => l.level === ERROR && l.incarnation === "earlier");
      expect(errors()).toHaveLength(1);
      expect(errors()[0]!.msg).toContain("LIVECOUNT_NODE_ID must be unique in a DC");
      await clock.advance(10_000);
      await twin(startedAt - 1, "earlier");
      expect(errors()).toHaveLength(2);
      expect(errors()[1]!.suppressed).toBe(1);
      expect(superseded).toEqual([]);
      expect(changes).toHaveLength(before);
      expect(m.ring.nodes).toEqual(["n-a"]);
    });

    test("cluster - the same start breaks the tie by incarnation, so both processes agree which one stops", async () => {
      const { clock, join } = setUp();
      const { m } = join("n-a");
      const superseded: string[] = [];
      m.onSuperseded((by) => superseded.push(by.incarnation));
      // "0" sorts before every UUID, and "<uuid>-z" after this one's.
      await twin(clock.now(), "0");
      expect(superseded).toEqual([]);
      await twin(clock.now(), `${m.incarnation}-z`);
      expect(superseded).toEqual([`${m.incarnation}-z`]);
    });

    test("cluster - its leaving heartbeat does not take this node off its own ring", async () => {
      const { clock, join } = setUp();
      const { m } = join("n-a");
      const superseded: unknown[] = [];
      m.onSuperseded((by) => superseded.push(by));
      await twin(clock.now() + 1, "later", "leaving");
      await clock.advance(2 * LEASE_MS);
      expect(m.ring.nodes).toEqual(["n-a"]);
      expect(superseded).toEqual([]);
    });

    test("cluster - its own earlier incarnations, echoed late after a renewal, are still its own", async () => {
      const { clock, join } = setUp();
      const { m } = join("n-a");
      const superseded: unknown[] = [];
      m.onSuperseded((by) => superseded.push(by));
      const first = m.incarnation;
      m.renewIncarnation();
      await twin(clock.now() + 1, first);
      expect(superseded).toEqual([]);
    });
  });

  test("cluster - stopping a membership that never started is harmless", () => {
    bus = new MemoryBus({ clock: new ManualClock() });
    const m = new Membership({
      bus,
      clock: new ManualClock(),
      logger: logLines().logger,
      dc: "dc1",
      partitions: PARTITIONS,
      vnodes: VNODES,
      leaseMs: LEASE_MS,
    });
    expect(() => m.stop()).not.toThrow();
  });
});
