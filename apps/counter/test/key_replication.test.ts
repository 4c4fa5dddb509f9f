/**
 * Idempotency keys across data centers (key_replication.ts), two DCs' nodes on one in-memory bus
 * (key_nodes.ts): what one DC sends, one node of the other stores beside its own keys, whoever holds
 * the partition; imports go one store call at a time, bounded; RecentKeys hands over the keys of
 * changes the store applied or replayed, never of errors. Acknowledgements and resends:
 * key_replication_acks.test.ts.
 */
import { partitionKeysSubject } from "@livecount/bus";
import { encodeMessage, type IncrementRequest, type NodeReply } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { silentLogger } from "@livecount/runtime";
import { MemoryStore, type KeyRestore } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { RecentKeys, incrementUse } from "../src/recent_keys.js";
import {
  PARTITIONS,
  KEY_TTL_MS,
  PAGE,
  PARTITION,
  ELSEWHERE,
  nodeOf,
  like,
  answerOf,
  outcomes,
  setUp,
} from "./key_nodes.js";

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
    const keys = new Map([
      [PARTITION, [like("k2")]],
      [partitionOf(ELSEWHERE, PARTITIONS), [like("k3", ELSEWHERE), like("k4", ELSEWHERE)]],
    ]);
    expect(() => closed.keys.send(keys)).not.toThrow();
    // Every key of every message that could not go, none of them sent or held.
    expect(await outcomes(closed)).toEqual({ unsent: 3 });
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
});
