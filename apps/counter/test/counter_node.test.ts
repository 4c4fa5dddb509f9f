import { MemoryBus, nodeSubject, nodesSubject } from "@livecount/bus";
import {
  ACTIVE_COUNTER,
  CONNECTIONS_COUNTER,
  VIEWERS_COUNTER,
  decodeMessage,
  decodeNodeReply,
  encodeMessage,
  type NodeReply,
  type NodeRequest,
} from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { silentLogger } from "@livecount/runtime";
import { MemoryStore, PartialWriteError, type Lease } from "@livecount/store";
import { Registry } from "prom-client";
import { afterEach, describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { readCounterConfig } from "../src/counter_config.js";
import { CounterNode } from "../src/counter_node.js";
import { withoutBuckets } from "../../../test/support/records.js";

const PARTITIONS = 4;
const LEASE_MS = 3_000;

/** A MemoryStore whose renewals of some partitions fail while the rest go through, as a Redis Cluster shard that is down. */
class ShardedStore extends MemoryStore {
  readonly down = new Set<number>();

  /**
   * How long a renewal's answer takes to come back, on `clock`: a busy Redis runs it (at once here)
   * but answers only after the long flush scripts queued ahead of it.
   */
  renewReplyMs = 0;
  clock: ManualClock | undefined;

  override async renew(leases: readonly Lease[], ttlMs: number): Promise<Lease[]> {
    const failed = leases.filter((l) => this.down.has(l.partition));
    const renewed = await super.renew(
      leases.filter((l) => !this.down.has(l.partition)),
      ttlMs,
    );
    if (this.renewReplyMs > 0 && this.clock !== undefined) {
      const { clock } = this;
      await new Promise<void>((resolve) => clock.setTimeout(resolve, this.renewReplyMs));
    }
    if (failed.length > 0) throw new PartialWriteError(failed, renewed);
    return renewed;
  }
}

describe("counter - counter node lifecycle", () => {
  let clock: ManualClock;
  let bus: MemoryBus;
  let store: ShardedStore;
  let node: CounterNode;
  let metrics: Registry;

  afterEach(async () => {
    await node.stop();
    await bus.close();
  });

  /** `beforeStart` sees the bus before the node subscribes to anything on it. */
  async function start(beforeStart?: (bus: MemoryBus) => void): Promise<void> {
    clock = new ManualClock();
    bus = new MemoryBus({ clock });
    beforeStart?.(bus);
    store = new ShardedStore({ now: () => clock.now() });
    store.clock = clock;
    const config = readCounterConfig({
      LIVECOUNT_NODE_ID: "counter-1",
      LIVECOUNT_PARTITIONS: String(PARTITIONS),
      LIVECOUNT_PARTITION_LEASE_MS: String(LEASE_MS),
      LIVECOUNT_COALESCE_MS: "10",
    });
    metrics = new Registry();
    node = new CounterNode({ config, bus, store, logger: silentLogger, registry: metrics, clock });
    const started = node.start();
    await clock.advance(0);
    await started;
    await clock.advance(100);
    expect(node.ready).toBe(true);
  }

  /** A request to the node, with time moving (100 ms at a time) until it is answered. */
  async function ask(request: NodeRequest): Promise<NodeReply> {
    let answer: Uint8Array | undefined;
    const reply = bus.request(nodeSubject("dc1", "counter-1"), encodeMessage(request), { timeoutMs: 60_000 });
    void reply.then((r) => (answer = r));
    for (let waited = 0; answer === undefined; waited += 100) {
      if (waited > 60_000) throw new Error(`no answer to ${request.type}`);
      await clock.advance(answer === undefined && waited === 0 ? 0 : 100);
    }
    return decodeNodeReply(answer);
  }

  /** A page id in `partition`. */
  function pageIn(partition: number): string {
    for (let i = 0; ; i++) if (partitionOf(`node-${i}`, PARTITIONS) === partition) return `node-${i}`;
  }

  test("counter - a stop hands over: queued changes are committed and flushed, then every lease is released", async () => {
    await start();
    const page = pageIn(1);
    await ask({
      type: "presence",
      gateway: "gw",
      partition: 1,
      ops: [{ page, viewer: "v:1", present: true }],
    });
    const increment = bus.request(
      nodeSubject("dc1", "counter-1"),
      encodeMessage({ type: "increment", page, counter: "likes", delta: 2, key: "k" }),
    );
    await bus.flush();
    const stopped = node.stop();
    await clock.advance(0);
    await stopped;
    expect(decodeNodeReply(await increment)).toMatchObject({ type: "incremented", value: 2 });
    expect(withoutBuckets(await store.load(page))).toEqual({
      [VIEWERS_COUNTER]: { dc1: { p: 1, n: 0 } },
      [ACTIVE_COUNTER]: { dc1: { p: 1, n: 0 } },
      [CONNECTIONS_COUNTER]: { dc1: { p: 1, n: 0 } },
      likes: { dc1: { p: 2, n: 0 } },
    });
    // Released, not left to expire: another node takes every partition at once.
    for (let p = 0; p < PARTITIONS; p++)
      expect(await store.acquire(p, "counter-2/x", LEASE_MS)).not.toBeNull();
  });

  test("counter - lost leases drop their partitions' pages and announce one new incarnation for all of them", async () => {
    await start();
    const incarnations: string[] = [];
    bus.subscribe(nodesSubject("dc1"), (data) => {
      const msg = decodeMessage(data);
      if (msg.type === "node") incarnations.push(msg.incarnation);
    });
    const [a, b] = [pageIn(0), pageIn(2)];
    for (const [page, partition] of [
      [a, 0],
      [b, 2],
    ] as const) {
      await ask({
        type: "presence",
        gateway: "gw",
        partition,
        ops: [{ page, viewer: "v:1", present: true }],
      });
    }
    await clock.advance(50);
    const before = new Set(incarnations);
    // The node is frozen past its leases; meanwhile another process takes partitions 0 and 2.
    clock.jump(LEASE_MS + 1);
    for (const p of [0, 2]) expect(await store.acquire(p, "counter-2/x", LEASE_MS)).not.toBeNull();
    await clock.advance(LEASE_MS / 3 + 50);
    await bus.flush();
    const fresh = [...new Set(incarnations)].filter((i) => !before.has(i));
    expect(fresh).toHaveLength(1);
    // Their pages left memory with the partitions; the node is not ready until it holds them again.
    expect(await actorsInMemory()).toBe(0);
    expect(node.ready).toBe(false);
    // Meanwhile a read is refused as retryable within half the request timeout, never left to hang;
    // once the other process's leases run out the node takes them back and answers from the store.
    const refusals = new Set<string>();
    for (;;) {
      const asked = clock.now();
      const reply = await ask({ type: "snapshot", page: a });
      expect(clock.now() - asked).toBeLessThanOrEqual(1_600);
      if (reply.type === "page_state") break;
      refusals.add(reply.type === "error" ? reply.code : reply.type);
    }
    expect([...refusals]).toEqual(["unavailable"]);
    expect(node.ready).toBe(true);
  });

  test("counter - leases whose part of the store fails are left to run out while the others are renewed, and taken again after", async () => {
    await start();
    store.down.add(1);
    await clock.advance(LEASE_MS * 2);
    // The others were renewed all along: nobody else can take them.
    for (const p of [0, 2, 3]) expect(await store.acquire(p, "counter-2/x", LEASE_MS)).toBeNull();
    // Partition 1's ran out: another process could take it (and lets it go again at once).
    expect(await store.acquire(1, "counter-2/x", 1)).not.toBeNull();
    store.down.clear();
    // The node finds partition 1 lost and takes it again.
    await clock.advance(LEASE_MS);
    expect(await owned()).toBe(PARTITIONS);
    expect(node.ready).toBe(true);
  });

  test("counter - a reconnect of the bus is announced at once (reconnects: 1), so gateways re-take the snapshots of its pages; same incarnation, same leases and epochs, its pages stay", async () => {
    const reconnected: Array<() => void> = [];
    await start((bus) => {
      const on = bus.on.bind(bus);
      bus.on = ((event, listener) => {
        if (event === "reconnected") reconnected.push(listener as () => void);
        return on(event, listener);
      }) as MemoryBus["on"];
    });
    const beats: Array<{ incarnation: string; reconnects: number | undefined }> = [];
    bus.subscribe(nodesSubject("dc1"), (data) => {
      const msg = decodeMessage(data);
      if (msg.type === "node") beats.push({ incarnation: msg.incarnation, reconnects: msg.reconnects });
    });
    const page = pageIn(0);
    await ask({
      type: "presence",
      gateway: "gw",
      partition: 0,
      ops: [{ page, viewer: "v:1", present: true }],
    });
    await clock.advance(LEASE_MS);
    await bus.flush();
    expect(reconnected).toHaveLength(1);
    const [first] = beats;
    expect(first?.reconnects).toBeUndefined();
    const epochs = await Promise.all(Array.from({ length: PARTITIONS }, (_, p) => store.acquire(p, "x", 1)));
    // What the node published as the connection dropped may be lost.
    const heardBefore = beats.length;
    reconnected[0]!();
    await bus.flush();
    expect(beats.slice(heardBefore)).toEqual([{ incarnation: first!.incarnation, reconnects: 1 }]);
    await clock.advance(LEASE_MS);
    await bus.flush();
    expect(new Set(beats.map((b) => b.incarnation))).toEqual(new Set([first!.incarnation]));
    expect(beats.at(-1)?.reconnects).toBe(1);
    expect(node.ready).toBe(true);
    expect(await actorsInMemory()).toBe(1);
    expect(await owned()).toBe(PARTITIONS);
    expect(epochs.every((e) => e === null)).toBe(true);
  });

  test("counter - a node frozen past its leases that nobody took renews them with their epochs and keeps its pages", async () => {
    await start();
    const incarnations = new Set<string>();
    bus.subscribe(nodesSubject("dc1"), (data) => {
      const msg = decodeMessage(data);
      if (msg.type === "node") incarnations.add(msg.incarnation);
    });
    const page = pageIn(0);
    const join = (viewer: string) =>
      ask({ type: "presence", gateway: "gw", partition: 0, ops: [{ page, viewer, present: true }] });
    await join("v:1");
    await clock.advance(LEASE_MS); // a heartbeat or two, carrying the incarnation
    await bus.flush();
    expect(incarnations.size).toBe(1);
    // A stall (a long GC, a starved event loop) longer than the lease: the renewal goes out late.
    clock.jump(LEASE_MS + 1);
    await clock.advance(50);
    // Renewed, not lost: same epochs, the page still in memory, no new incarnation for gateways.
    expect(node.ready).toBe(true);
    expect(await actorsInMemory()).toBe(1);
    await bus.flush();
    expect(incarnations.size).toBe(1);
    for (let p = 0; p < PARTITIONS; p++) expect(await store.acquire(p, "counter-2/x", LEASE_MS)).toBeNull();
    expect(await join("v:2")).toEqual({ type: "ack" });
    await clock.advance(50);
    expect(withoutBuckets(await store.load(page))[VIEWERS_COUNTER]).toEqual({ dc1: { p: 2, n: 0 } });
  });

  test("counter - renewals answered after almost half a lease each keep every partition served", async () => {
    await start();
    store.renewReplyMs = LEASE_MS * 0.45;
    // Ten leases, checked every tenth of one: the fence never lapses, so nothing is refused.
    for (let step = 0; step < 100; step++) {
      await clock.advance(LEASE_MS / 10);
      expect(node.ready, `after ${String(step + 1)} tenths of a lease`).toBe(true);
    }
    expect(await owned()).toBe(PARTITIONS);
  });

  async function owned(): Promise<number> {
    const gauge = await metrics.getSingleMetric("livecount_counter_partitions_owned")?.get();
    return gauge?.values[0]?.value ?? NaN;
  }

  async function actorsInMemory(): Promise<number> {
    const gauge = await metrics.getSingleMetric("livecount_counter_actors")?.get();
    return gauge?.values[0]?.value ?? NaN;
  }
});
