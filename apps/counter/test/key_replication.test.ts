/**
 * Idempotency keys across data centers (key_replication.ts): KeyReplication instances standing for
 * two DCs' counter nodes on one in-memory bus, each DC with its own store. What one DC sends, one node of the other stores beside its own
 * keys, whoever holds the partition; imports go one store call at a time, bounded; RecentKeys hands
 * over the keys of changes the store applied or replayed, never of errors.
 */
import { MemoryBus, keysAckSubject, keysMissedSubject, partitionKeysSubject } from "@livecount/bus";
import { encodeMessage, type IncrementRequest, type NodeReply } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { silentLogger } from "@livecount/runtime";
import { MemoryStore, type KeyRestore, type Store } from "@livecount/store";
import { Registry } from "prom-client";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { CounterMetrics } from "../src/counter_metrics.js";
import { KeyReplication } from "../src/key_replication.js";
import { RecentKeys, incrementUse } from "../src/recent_keys.js";

const PARTITIONS = 16;
const KEY_TTL_MS = 60_000;
const PAGE = "p1";
const PARTITION = partitionOf(PAGE, PARTITIONS);
/** A page of another partition. */
const ELSEWHERE = Array.from({ length: 100 }, (_, i) => `q${i}`).find(
  (p) => partitionOf(p, PARTITIONS) !== PARTITION,
)!;

const ACK_WAIT_MS = 2000;
let nodes = 0;

interface Node {
  readonly keys: KeyReplication;
  readonly metrics: CounterMetrics;
  readonly node: string;
}

function nodeOf(
  bus: MemoryBus,
  store: Store,
  dc: string,
  options: {
    enabled?: boolean;
    maxQueued?: number;
    mayBeHeard?: () => boolean;
    gather?: { ms: number; clock: ManualClock };
    /** The clock and the cap of what is held for DCs that may miss it. */
    clock?: ManualClock;
    maxHeld?: number;
  } = {},
): Node {
  const metrics = new CounterMetrics(new Registry(), {
    partitionsOwned: () => 1,
    partitionsBootstrapped: () => 1,
  });
  const node = `${dc}-n${++nodes}`;
  const keys = new KeyReplication({
    dc,
    node,
    bus,
    store,
    logger: silentLogger,
    metrics,
    partitions: PARTITIONS,
    keyTtlMs: KEY_TTL_MS,
    enabled: options.enabled ?? true,
    maxQueued: options.maxQueued ?? 1000,
    mayBeHeard: options.mayBeHeard ?? (() => true),
    resendCoalesceMs: 250,
    held: {
      clock: options.clock ?? new ManualClock(),
      peers: [],
      keysTaken: () => "acks",
      discovering: () => false,
      ackWaitMs: ACK_WAIT_MS,
      keepMs: () => 6000,
      ttlMs: KEY_TTL_MS,
      maxKeys: options.maxHeld ?? 1000,
    },
    ...(options.gather !== undefined ? { gather: options.gather } : {}),
  });
  keys.start();
  return { keys, metrics, node };
}

function like(key: string, page = PAGE): KeyRestore {
  return { page, key, counter: "likes", delta: 1, payload: `{"value":1,"updatedAt":5,"key":"${key}"}` };
}

/** What `store` answers a like under `key` now: "applied", or the payload it replays. */
async function answerOf(store: MemoryStore, key: string, page = PAGE): Promise<string> {
  const partition = partitionOf(page, PARTITIONS);
  const fence = (await store.acquire(partition, "holder", KEY_TTL_MS))!;
  const [outcome] = await store.increment(
    [{ fence, page, counter: "likes", dc: "dc2", delta: 1, key, payload: "{}" }],
    KEY_TTL_MS,
  );
  return outcome!.kind === "duplicate" ? outcome!.payload : outcome!.kind;
}

async function outcomes(...nodes: Node[]): Promise<Record<string, number>> {
  const sums: Record<string, number> = {};
  for (const node of nodes)
    for (const v of (await node.metrics.keysAcrossDcs.get()).values)
      sums[String(v.labels.outcome)] = (sums[String(v.labels.outcome)] ?? 0) + v.value;
  return sums;
}

/** A store whose importKeys waits until `release()`, counting its calls. */
class HeldImports extends MemoryStore {
  calls = 0;
  #gate: Promise<void> = Promise.resolve();
  #open: () => void = () => {};

  hold(): void {
    this.#gate = new Promise((resolve) => (this.#open = resolve));
  }

  open(): void {
    this.#open();
  }

  override async importKeys(keys: ReadonlyMap<number, readonly KeyRestore[]>, ttl: number): Promise<number> {
    this.calls++;
    await this.#gate;
    return super.importKeys(keys, ttl);
  }
}

function setUp() {
  const clock = new ManualClock();
  const bus = new MemoryBus({ clock });
  const stores = {
    dc1: new MemoryStore({ now: () => clock.now() }),
    dc2: new HeldImports({ now: () => clock.now() }),
  };
  return { clock, bus, stores };
}

/** dc2's store held on a call importing "a", with "b" and "c" queued behind it at dc2's node. */
async function heldBacklog() {
  const { clock, bus, stores } = setUp();
  const one = nodeOf(bus, stores.dc1, "dc1");
  const two = nodeOf(bus, stores.dc2, "dc2");
  stores.dc2.hold();
  one.keys.send(new Map([[PARTITION, [like("a")]]]));
  await clock.advance(0);
  one.keys.send(new Map([[PARTITION, [like("b"), like("c")]]]));
  await clock.advance(0);
  return { clock, bus, stores, one, two };
}

describe("counter - idempotency keys across data centers", () => {
  test("counter - keys one DC sends are stored once by the other DC's nodes, which keep their own; none by the sender", async () => {
    const { clock, bus, stores } = setUp();
    const one = nodeOf(bus, stores.dc1, "dc1");
    // Two nodes of dc2 in its queue group, neither holding the partition: one stores each message.
    const twoA = nodeOf(bus, stores.dc2, "dc2");
    const twoB = nodeOf(bus, stores.dc2, "dc2");
    expect(await answerOf(stores.dc2, "mine")).toBe("applied");
    one.keys.send(new Map([[PARTITION, [like("k1"), like("mine")]]]));
    await clock.advance(0);
    expect(await answerOf(stores.dc2, "k1")).toBe(like("k1").payload);
    expect(await answerOf(stores.dc2, "mine")).toBe("{}");
    expect(await answerOf(stores.dc1, "k1")).toBe("applied");
    expect(await outcomes(one)).toEqual({ sent: 2 });
    expect(await outcomes(twoA, twoB)).toEqual({ stored: 1, kept: 1 });
    expect(stores.dc2.calls).toBe(1);
    // A node that stops leaves the group to the others.
    twoA.keys.stop();
    twoB.keys.stop();
    const twoC = nodeOf(bus, stores.dc2, "dc2");
    one.keys.send(new Map([[PARTITION, [like("k2")]]]));
    await clock.advance(0);
    expect(await outcomes(twoC)).toEqual({ stored: 1 });
  });

  test("counter - a malformed message, or a page under another partition's subject, is dropped and counted; what follows is stored", async () => {
    const { clock, bus, stores } = setUp();
    const one = nodeOf(bus, stores.dc1, "dc1");
    const two = nodeOf(bus, stores.dc2, "dc2");
    bus.publish(partitionKeysSubject("dc1", PARTITION), new Uint8Array([0xc1]));
    bus.publish(partitionKeysSubject("dc1", PARTITION), encodeMessage({ type: "ack" }));
    one.keys.send(new Map([[PARTITION, [like("k1"), like("k2", ELSEWHERE)]]]));
    await clock.advance(0);
    expect(await answerOf(stores.dc2, "k1")).toBe(like("k1").payload);
    expect(await answerOf(stores.dc2, "k2", ELSEWHERE)).toBe("applied");
    expect(await outcomes(two)).toEqual({ malformed: 3, stored: 1 });
  });

  test("counter - a node that leaves (a graceful stop) stores what it holds; the group's other nodes take what comes after", async () => {
    const { clock, bus, stores, one, two: leaving } = await heldBacklog();
    leaving.keys.leave();
    const staying = nodeOf(bus, stores.dc2, "dc2");
    one.keys.send(new Map([[PARTITION, [like("d")]]]));
    await clock.advance(0);
    let drained = false;
    void leaving.keys.drained().then(() => (drained = true));
    await clock.advance(0);
    expect(drained).toBe(false);
    stores.dc2.open();
    await clock.advance(0);
    expect(drained).toBe(true);
    expect(await outcomes(leaving)).toEqual({ stored: 3 });
    expect(await outcomes(staying)).toEqual({ stored: 1 });
  });

  test("counter - a node that stops drops what it still holds, counted, and calls the store no more", async () => {
    const { clock, stores, two } = await heldBacklog();
    two.keys.stop();
    stores.dc2.open();
    await clock.advance(0);
    expect(stores.dc2.calls).toBe(1);
    expect(await outcomes(two)).toEqual({ dropped: 2, stored: 1 });
  });

  test("counter - imports go one store call at a time, each with every key that came meanwhile, at most LIVECOUNT_IDEMPOTENCY_IMPORT_MAX_KEYS waiting", async () => {
    const { clock, bus, stores } = setUp();
    const one = nodeOf(bus, stores.dc1, "dc1");
    const two = nodeOf(bus, stores.dc2, "dc2", { maxQueued: 10 });
    stores.dc2.hold();
    one.keys.send(new Map([[PARTITION, [like("a")]]]));
    await clock.advance(0);
    expect(stores.dc2.calls).toBe(1);
    // While that call waits: three messages, 12 keys; the third would pass 10, and is dropped whole
    // (not acknowledged: it comes again).
    for (const keys of [
      ["b", "c"],
      ["d", "e", "f", "g"],
      ["h", "i", "j", "k", "l", "m"],
    ])
      one.keys.send(new Map([[PARTITION, keys.map((k) => like(k))]]));
    await clock.advance(0);
    expect(stores.dc2.calls).toBe(1);
    expect(await outcomes(two)).toEqual({ dropped: 6 });
    stores.dc2.open();
    await clock.advance(0);
    expect(stores.dc2.calls).toBe(2);
    expect(await outcomes(two)).toEqual({ dropped: 6, stored: 7 });
    expect(await answerOf(stores.dc2, "g")).toBe(like("g").payload);
    expect(await answerOf(stores.dc2, "h")).toBe("applied");
  });

  test("counter - a backlog goes to the store 200 keys a call, whatever the partitions", async () => {
    const { clock, bus, stores } = setUp();
    const one = nodeOf(bus, stores.dc1, "dc1");
    nodeOf(bus, stores.dc2, "dc2", { maxQueued: 10_000 });
    const sizes: number[] = [];
    const importKeys = stores.dc2.importKeys.bind(stores.dc2);
    stores.dc2.importKeys = (keys, ttl) => {
      sizes.push([...keys.values()].reduce((n, list) => n + list.length, 0));
      return importKeys(keys, ttl);
    };
    stores.dc2.hold();
    one.keys.send(new Map([[PARTITION, [like("first")]]]));
    await clock.advance(0);
    const other = partitionOf(ELSEWHERE, PARTITIONS);
    const many = (page: string, n: number) => Array.from({ length: n }, (_, i) => like(`${page}-${i}`, page));
    one.keys.send(new Map([[PARTITION, many(PAGE, 150)]]));
    one.keys.send(new Map([[other, many(ELSEWHERE, 300)]]));
    await clock.advance(0);
    stores.dc2.open();
    await clock.advance(0);
    expect(sizes).toEqual([1, 200, 200, 50]);
    expect(await answerOf(stores.dc2, `${ELSEWHERE}-299`, ELSEWHERE)).toBe(
      like(`${ELSEWHERE}-299`, ELSEWHERE).payload,
    );
  });

  test("counter - with a gathering time (Redis Cluster) keys that come within it share a call; a full batch goes at once, and a leaving node waits no more", async () => {
    const { clock, bus, stores } = setUp();
    const one = nodeOf(bus, stores.dc1, "dc1");
    const two = nodeOf(bus, stores.dc2, "dc2", { maxQueued: 10_000, gather: { ms: 50, clock } });
    const sizes: number[] = [];
    const importKeys = stores.dc2.importKeys.bind(stores.dc2);
    stores.dc2.importKeys = (keys, ttl) => {
      sizes.push([...keys.values()].reduce((n, list) => n + list.length, 0));
      return importKeys(keys, ttl);
    };
    const other = partitionOf(ELSEWHERE, PARTITIONS);
    one.keys.send(new Map([[PARTITION, [like("a")]]]));
    await clock.advance(20);
    one.keys.send(new Map([[other, [like("b", ELSEWHERE)]]]));
    await clock.advance(29);
    expect(sizes).toEqual([]);
    await clock.advance(1);
    expect(sizes).toEqual([2]);
    // A backlog of full batches goes call after call; what is left after them gathers again.
    const many = (page: string, n: number) => Array.from({ length: n }, (_, i) => like(`${page}-${i}`, page));
    one.keys.send(new Map([[PARTITION, many(PAGE, 450)]]));
    await clock.advance(50);
    expect(sizes).toEqual([2, 200, 200]);
    await clock.advance(50);
    expect(sizes).toEqual([2, 200, 200, 50]);
    // A node leaving stores what it holds at once.
    one.keys.send(new Map([[PARTITION, [like("last")]]]));
    await clock.advance(10);
    expect(sizes).toEqual([2, 200, 200, 50]);
    two.keys.leave();
    await two.keys.drained();
    expect(sizes).toEqual([2, 200, 200, 50, 1]);
    expect(await answerOf(stores.dc2, "last")).toBe(like("last").payload);
    expect(await outcomes(two)).toEqual({ stored: 453 });
  });

  test("counter - nothing is sent before another DC may hear it, nor received when turned off; a publish that throws is counted, not thrown", async () => {
    const { clock, bus, stores } = setUp();
    let heard = false;
    expect(nodeOf(bus, stores.dc1, "dc1", { mayBeHeard: () => heard }).keys.sending).toBe(false);
    heard = true;
    const off = nodeOf(bus, stores.dc1, "dc1", { enabled: false });
    expect(off.keys.sending).toBe(false);
    nodeOf(bus, stores.dc2, "dc2", { enabled: false });
    nodeOf(bus, stores.dc1, "dc1").keys.send(new Map([[PARTITION, [like("k1")]]]));
    await clock.advance(0);
    expect(await answerOf(stores.dc2, "k1")).toBe("applied");
    const closed = nodeOf(bus, stores.dc1, "dc1");
    await bus.close();
    expect(() => closed.keys.send(new Map([[PARTITION, [like("k2")]]]))).not.toThrow();
    expect(await outcomes(closed)).toEqual({ unsent: 1 });
  });

  test("counter - RecentKeys hands over the keys of changes applied or replayed, by partition, never of errors", async () => {
    const clock = new ManualClock();
    const sent: Array<Map<number, readonly KeyRestore[]>> = [];
    let sending = true;
    const keys = new RecentKeys({
      clock,
      logger: silentLogger,
      store: new MemoryStore({ now: () => clock.now() }),
      fenceOf: () => undefined,
      keyTtlMs: KEY_TTL_MS,
      memoryMs: 3_000,
      maxKeys: 100,
      across: {
        get sending() {
          return sending;
        },
        send: (byPartition) => sent.push(new Map(byPartition)),
      },
    });
    const request = (key: string): IncrementRequest => ({
      type: "increment",
      page: PAGE,
      counter: "likes",
      delta: 1,
      key,
    });
    const incremented: NodeReply = {
      type: "incremented",
      page: PAGE,
      counter: "likes",
      value: 3,
      updatedAt: 5,
      duplicate: false,
    };
    const replayed: NodeReply = { ...incremented, duplicate: true };
    const failed: NodeReply = { type: "error", code: "unavailable", message: "store down" };
    const answer = (key: string, partition: number, reply: NodeReply = incremented) => ({
      pending: { actor: { partition }, request: request(key), resolve: () => {} },
      reply,
    });
    const record = (key: string, reply = incremented): KeyRestore => incrementUse(request(key), reply).record;
    await keys.settled(
      [answer("a", 1), answer("b", 2), answer("c", 1, replayed), answer("d", 1, failed)],
      0,
      incrementUse,
    );
    expect(sent).toEqual([
      new Map([
        [1, [record("a"), record("c", replayed)]],
        [2, [record("b")]],
      ]),
    ]);
    sending = false;
    await keys.settled([answer("e", 1)], 0, incrementUse);
    expect(sent).toHaveLength(1);
  });

  test("counter - held keys go again once per cause within a heartbeat: heard again (up or gap), or asked by the DC", async () => {
    const { clock, bus, stores } = setUp();
    const one = nodeOf(bus, stores.dc1, "dc1", { clock });
    one.keys.send(new Map([[PARTITION, [like("h1"), like("h2")]]]));
    const resent = async (): Promise<number> => (await outcomes(one)).resent ?? 0;
    // Each of dc2's nodes' heartbeats shows the gap: one resend.
    one.keys.remoteChanged("dc2", "gap");
    one.keys.remoteChanged("dc2", "gap");
    expect(await resent()).toBe(2);
    // Each of dc2's nodes asks: one resend more, asking being a cause of its own.
    bus.publish(keysMissedSubject("dc1", "dc2"), new Uint8Array(0));
    bus.publish(keysMissedSubject("dc1", "dc2"), new Uint8Array(0));
    await clock.advance(0);
    expect(await resent()).toBe(4);
    // Another DC, or a heartbeat later: again.
    one.keys.remoteChanged("dc3", "up");
    await clock.advance(250);
    one.keys.remoteChanged("dc2", "up");
    expect(await resent()).toBe(8);
  });

  test("counter - what the other DC stored it acknowledges, and it is let go; what is not goes again until it is", async () => {
    const { clock, bus, stores } = setUp();
    const one = nodeOf(bus, stores.dc1, "dc1", { clock });
    const two = nodeOf(bus, stores.dc2, "dc2", { clock });
    const resent = async (): Promise<number> => (await outcomes(one)).resent ?? 0;
    const held = async (): Promise<number> => (await one.metrics.keysHeld.get()).values[0]?.value ?? 0;
    one.keys.remoteChanged("dc2", "up");
    one.keys.send(new Map([[PARTITION, [like("m1"), like("m2")]]]));
    expect(await held()).toBe(2);
    await clock.advance(0);
    expect(await held(), "stored in dc2 and acknowledged").toBe(0);
    // dc2's only node gone: nothing stores or acknowledges m3.
    two.keys.stop();
    one.keys.send(new Map([[PARTITION, [like("m3")]]]));
    await clock.advance(ACK_WAIT_MS);
    expect(await resent(), "sent again once it waited").toBe(1);
    const twoAgain = nodeOf(bus, stores.dc2, "dc2", { clock });
    await clock.advance(2 * ACK_WAIT_MS);
    expect(await resent(), "and again, twice as long after").toBe(2);
    expect(await outcomes(twoAgain)).toEqual({ stored: 1 });
    expect(await held()).toBe(0);
    await clock.advance(10 * ACK_WAIT_MS);
    expect(await resent(), "acknowledged: no more").toBe(2);
    // An acknowledgement of another process under this node id, or malformed: nothing let go.
    twoAgain.keys.stop();
    one.keys.send(new Map([[PARTITION, [like("m4")]]]));
    // A name no DC here goes by: not answered (m4 would go again), not remembered.
    bus.publish(keysMissedSubject("dc1", "dc9"), new Uint8Array(0));
    const acks = keysAckSubject("dc1", one.node);
    bus.publish(acks, encodeMessage({ type: "keysack", dc: "dc2", epoch: 1, seqs: [1, 2, 3, 4, 5] }));
    bus.publish(acks, new Uint8Array([0xc1]));
    await clock.advance(0);
    expect(await held()).toBe(1);
    expect(await resent()).toBe(2);
  });

  test("counter - a message larger than the import queue is taken whole into an empty one; a node that stops counts what was not acknowledged lost", async () => {
    const { clock, bus, stores } = setUp();
    const one = nodeOf(bus, stores.dc1, "dc1", { clock });
    const two = nodeOf(bus, stores.dc2, "dc2", { clock, maxQueued: 1 });
    one.keys.remoteChanged("dc2", "up");
    one.keys.send(new Map([[PARTITION, [like("w1"), like("w2"), like("w3")]]]));
    await clock.advance(0);
    expect(await outcomes(two)).toEqual({ stored: 3 });
    expect((await one.metrics.keysHeld.get()).values[0]?.value, "acknowledged").toBe(0);
    two.keys.stop();
    one.keys.send(new Map([[PARTITION, [like("w4"), like("w5")]]]));
    await clock.advance(ACK_WAIT_MS);
    one.keys.stop();
    expect((await outcomes(one)).lost, "not acknowledged past the first wait").toBe(2);
  });
});
