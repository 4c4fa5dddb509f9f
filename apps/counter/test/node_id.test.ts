import { BusDisconnectedError, MemoryBus, nodeSubject, nodesSubject } from "@livecount/bus";
import { decodeMessage, encodeMessage } from "@livecount/protocol";
import { MemoryStore } from "@livecount/store";
import { Registry } from "prom-client";
import { afterEach, describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { ERROR, WARN, logLines } from "../../../packages/cluster/test/log_lines.js";
import { readCounterConfig } from "../src/counter_config.js";
import { CounterNode } from "../src/counter_node.js";
import { NodeIdInUseError, NodeIdUnknownError, claimNodeId } from "../src/node_id_claim.js";
import { ForwardingBus } from "../../../test/support/forwarding_bus.js";

const PARTITIONS = 4;
const NODE_LEASE_MS = 1500;
const PARTITION_LEASE_MS = 2000;
/** A process holding the node's subject has a node heartbeat interval to answer. */
const ANSWER_MS = NODE_LEASE_MS / 3;

const config = readCounterConfig({
  LIVECOUNT_NODE_ID: "counter-1",
  LIVECOUNT_PARTITIONS: String(PARTITIONS),
  LIVECOUNT_NODE_LEASE_MS: String(NODE_LEASE_MS),
  LIVECOUNT_PARTITION_LEASE_MS: String(PARTITION_LEASE_MS),
});

/**
 * One process per node id (docs/architecture.md, "Recovery and known gaps"): a second live process
 * under an id is refused at its start; one that took the id from a frozen process stops that one
 * once it thaws.
 */
describe("counter - one process per node id", () => {
  let clock: ManualClock;
  let bus: MemoryBus;
  let store: MemoryStore;
  const nodes: CounterNode[] = [];

  afterEach(async () => {
    for (const node of nodes.splice(0)) await node.stop();
    await bus.close();
  });

  function setUp(): void {
    clock = new ManualClock();
    bus = new MemoryBus({ clock });
    store = new MemoryStore({ now: () => clock.now() });
  }

  function newNode(logger = logLines().logger, onSuperseded?: () => void): CounterNode {
    const node = new CounterNode({
      config,
      bus,
      store,
      logger,
      registry: new Registry(),
      clock,
      ...(onSuperseded !== undefined ? { onSuperseded } : {}),
    });
    nodes.push(node);
    return node;
  }

  /** Starts `node` on the manual clock and waits until it serves every partition. */
  async function started(node: CounterNode): Promise<void> {
    const starting = node.start();
    while (!node.ready) await clock.advance(50);
    await starting;
  }

  test("counter - a second process under a live node's id refuses to start, and the first keeps every lease", async () => {
    setUp();
    const first = newNode();
    await started(first);
    const leases = await Promise.all([0, 1, 2, 3].map((p) => store.acquire(p, "probe", 1)));
    expect(leases).toEqual([null, null, null, null]);

    const second = newNode();
    const starting = second.start();
    starting.catch(() => {});
    await clock.advance(0);
    await expect(starting).rejects.toThrow(NodeIdInUseError);
    await expect(starting).rejects.toThrow(/LIVECOUNT_NODE_ID counter-1 is in use by a live counter node/);
    // Past two partition leases the first one still serves, with the epochs it started with.
    await clock.advance(2 * PARTITION_LEASE_MS);
    expect(first.ready).toBe(true);
    expect(await nodeInfoPartitions()).toEqual([
      [0, 1],
      [1, 1],
      [2, 1],
      [3, 1],
    ]);
  });

  test("counter - the usual start finds no responder and goes on at once", async () => {
    setUp();
    const { logger, lines } = logLines();
    let done = false;
    void claimNodeId(bus, clock, logger, config).then(() => (done = true));
    await clock.advance(0);
    expect(done).toBe(true);
    expect(lines.filter((l) => l.level >= WARN)).toEqual([]);
  });

  test("counter - a process that holds the id's subject and answers nothing (frozen) is taken over after a node lease", async () => {
    setUp();
    const { logger, lines } = logLines();
    bus.subscribe(nodeSubject("dc1", "counter-1"), () => {});
    let done = false;
    void claimNodeId(bus, clock, logger, config).then(() => (done = true));
    // Asked every heartbeat interval; a node stalled for a moment would answer one of them.
    await clock.advance(NODE_LEASE_MS - 1);
    expect(done).toBe(false);
    await clock.advance(1);
    expect(done).toBe(true);
    expect(lines.filter((l) => l.level === WARN).map((l) => l.msg)).toEqual([
      "a process holds this node id and has not answered for a node lease; taking its place",
    ]);
  });

  test("counter - a live node that answers late, within the node lease, keeps its id", async () => {
    setUp();
    let asked = 0;
    const info = encodeMessage({
      type: "node_info",
      node: "counter-1",
      incarnation: "live",
      ready: true,
      partitions: [],
      actors: 0,
      dirty: 0,
      flushLagMs: 0,
      bootstrapped: 0,
      resyncing: {},
      ts: 0,
    });
    // Stalled past the first two asks (each waits a heartbeat interval), it answers the third.
    bus.serve(nodeSubject("dc1", "counter-1"), async () => {
      if (++asked < 3) await new Promise<void>((resolve) => clock.setTimeout(resolve, 2 * ANSWER_MS));
      return info;
    });
    const claim = claimNodeId(bus, clock, logLines().logger, config);
    claim.catch(() => {});
    await clock.advance(3 * ANSWER_MS);
    await expect(claim).rejects.toThrow(NodeIdInUseError);
  });

  test("counter - any other answer means a live process; a bus that stays down fails the start after a node lease", async () => {
    setUp();
    bus.serve(nodeSubject("dc1", "counter-1"), () => {
      throw new Error("broken");
    });
    const answered = claimNodeId(bus, clock, logLines().logger, config);
    answered.catch(() => {});
    await clock.advance(0);
    await expect(answered).rejects.toThrow(NodeIdInUseError);

    const down = new (class extends ForwardingBus {
      override request(): Promise<Uint8Array> {
        return Promise.reject(new BusDisconnectedError("NATS is reconnecting"));
      }
    })(bus);
    let settled: unknown;
    claimNodeId(down, clock, logLines().logger, config).then(
      () => (settled = "started"),
      (err: unknown) => (settled = err),
    );
    await clock.advance(NODE_LEASE_MS - 100);
    expect(settled).toBeUndefined();
    await clock.advance(100);
    expect(settled).toBeInstanceOf(NodeIdUnknownError);
  });

  test("counter - a predecessor still stopping is waited for until it is gone, at most two partition leases", async () => {
    setUp();
    const stopping = encodeMessage({
      type: "error",
      code: "unavailable",
      message: "counter node is stopping",
    });
    const sub = bus.serve(nodeSubject("dc1", "counter-1"), () => stopping);
    let done = false;
    void claimNodeId(bus, clock, logLines().logger, config).then(() => (done = true));
    await clock.advance(700);
    expect(done).toBe(false);
    // Its stop ends: it unsubscribes, and the next ask finds nobody.
    sub.unsubscribe();
    await clock.advance(100);
    expect(done).toBe(true);

    // One that never ends its stop is waited for two partition leases, then taken over.
    bus.serve(nodeSubject("dc1", "counter-1"), () => stopping);
    const { logger, lines } = logLines();
    done = false;
    void claimNodeId(bus, clock, logger, config).then(() => (done = true));
    await clock.advance(2 * PARTITION_LEASE_MS - 100);
    expect(done).toBe(false);
    await clock.advance(100);
    expect(done).toBe(true);
    expect(lines.map((l) => l.msg)).toContain(
      "a process under this node id is still stopping; taking its place",
    );
  });

  test("counter - a node that hears a later process under its id stops at once: it hands nothing over and says it leaves nobody", async () => {
    setUp();
    const { logger, lines } = logLines();
    let superseded = 0;
    const node = newNode(logger, () => superseded++);
    await started(node);
    const beats: unknown[] = [];
    bus.subscribe(nodesSubject("dc1"), (data) => void beats.push(decodeMessage(data)));
    bus.publish(nodesSubject("dc1"), successorBeat());
    await clock.advance(0);
    expect(superseded).toBe(1);
    expect(node.ready).toBe(false);
    expect(lines.filter((l) => l.level === ERROR).map((l) => l.msg)).toEqual([
      "a later process took this node id; stopping without handing over",
    ]);
    // The leases stay where they were, unreleased (the successor's to take), and no heartbeat
    // follows the successor's: a `leaving` one would take the id off every ring.
    expect(await Promise.all([0, 1, 2, 3].map((p) => store.acquire(p, "probe", 1)))).toEqual([
      null,
      null,
      null,
      null,
    ]);
    await clock.advance(2 * NODE_LEASE_MS);
    expect(beats).toHaveLength(1);
    await expect(
      bus.request(nodeSubject("dc1", "counter-1"), encodeMessage({ type: "node_status" })),
    ).rejects.toThrow(/no responders/);
  });

  test("counter - superseded while it starts: the start ends there, and a stop waits for the halt", async () => {
    setUp();
    // The successor's heartbeat arrives as soon as the node listens, while its start goes on.
    const hearing = new (class extends ForwardingBus {
      override subscribe(...args: Parameters<MemoryBus["subscribe"]>) {
        const sub = super.subscribe(...args);
        if (args[0] === nodesSubject("dc1"))
          queueMicrotask(() => args[1](successorBeat(), nodesSubject("dc1")));
        return sub;
      }
    })(bus);
    const { logger, lines } = logLines();
    let superseded = 0;
    const node = new CounterNode({
      config,
      bus: hearing,
      store,
      logger,
      registry: new Registry(),
      clock,
      onSuperseded: () => superseded++,
    });
    nodes.push(node);
    const starting = node.start();
    await clock.advance(0);
    await starting;
    await node.stop();
    expect(superseded).toBe(1);
    expect(node.ready).toBe(false);
    const messages = lines.map((l) => l.msg);
    expect(messages).toContain("a later process took this node id; stopping without handing over");
    expect(messages).not.toContain("counter node started");
    // Nothing runs after the halt: no sweep of a closed registry, no heartbeat.
    const beats: unknown[] = [];
    bus.subscribe(nodesSubject("dc1"), (data) => void beats.push(decodeMessage(data)));
    await clock.advance(2 * NODE_LEASE_MS);
    expect(beats).toEqual([]);
    expect(lines.filter((l) => l.level >= WARN && !l.msg.startsWith("a later process"))).toEqual([]);
  });

  /** A heartbeat of counter-1 from a process started after this one. */
  function successorBeat(): Uint8Array {
    return encodeMessage({
      type: "node",
      node: "counter-1",
      incarnation: "successor",
      leaseMs: NODE_LEASE_MS,
      state: "up",
      startedAt: clock.now() + 1,
    });
  }

  async function nodeInfoPartitions(): Promise<unknown> {
    const reply = decodeMessage(
      await bus.request(nodeSubject("dc1", "counter-1"), encodeMessage({ type: "node_status" })),
    );
    if (reply.type !== "node_info") throw new Error(`unexpected ${reply.type}`);
    return reply.partitions;
  }
});
