/**
 * Idempotency keys across data centers (key_replication.ts): two DCs' owners of one partition on one
 * in-memory bus, each with its own store. What one applies, the other stores beside its own keys;
 * RecentKeys hands over the keys of changes the store applied, never of replays or errors.
 */
import { MemoryBus } from "@livecount/bus";
import { encodeMessage, type IncrementRequest, type NodeReply } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { silentLogger } from "@livecount/runtime";
import { MemoryStore, type Fence, type KeyRestore } from "@livecount/store";
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

interface Dc {
  readonly name: string;
  readonly store: MemoryStore;
  readonly keys: KeyReplication;
  readonly metrics: CounterMetrics;
  /** The partition's fence here (undefined: not held), and whether another DC is heard. */
  readonly state: { fence: Fence | undefined; othersLive: boolean };
}

async function dcOn(bus: MemoryBus, clock: ManualClock, name: string, enabled = true): Promise<Dc> {
  const store = new MemoryStore({ now: () => clock.now() });
  const metrics = new CounterMetrics(new Registry(), {
    partitionsOwned: () => 1,
    partitionsBootstrapped: () => 1,
  });
  const state: Dc["state"] = {
    fence: (await store.acquire(PARTITION, `${name}-node`, KEY_TTL_MS)) ?? undefined,
    othersLive: true,
  };
  const keys = new KeyReplication({
    dc: name,
    bus,
    store,
    logger: silentLogger,
    metrics,
    partitions: PARTITIONS,
    fenceOf: (partition) => (partition === PARTITION ? state.fence : undefined),
    keyTtlMs: KEY_TTL_MS,
    enabled,
    othersLive: () => state.othersLive,
  });
  keys.partitionHeld(PARTITION);
  return { name, store, metrics, keys, state };
}

function like(key: string, page = PAGE, delta = 1): KeyRestore {
  return { page, key, counter: "likes", delta, payload: `{"value":${delta},"updatedAt":5}` };
}

/** What `dc`'s store answers a like under `key` now: "applied", or the payload it replays. */
async function answerOf(dc: Dc, key: string, page = PAGE): Promise<string> {
  const fence =
    dc.state.fence ?? (await dc.store.acquire(partitionOf(page, PARTITIONS), `${dc.name}-node`, KEY_TTL_MS))!;
  const [outcome] = await dc.store.increment(
    [{ fence, page, counter: "likes", dc: dc.name, delta: 1, key, payload: "{}" }],
    KEY_TTL_MS,
  );
  return outcome!.kind === "duplicate" ? outcome!.payload : outcome!.kind;
}

async function outcomes(dc: Dc): Promise<Record<string, number>> {
  const metric = await dc.metrics.keysAcrossDcs.get();
  return Object.fromEntries(metric.values.map((v) => [String(v.labels.outcome), v.value]));
}

async function setUp(enabled = true) {
  const clock = new ManualClock();
  const bus = new MemoryBus({ clock });
  const [one, two] = [await dcOn(bus, clock, "dc1", enabled), await dcOn(bus, clock, "dc2", enabled)];
  return { clock, bus, one, two };
}

describe("counter - idempotency keys across data centers", () => {
  test("counter - keys one DC applied are stored by the other, which keeps its own; the sender ignores its own", async () => {
    const { clock, one, two } = await setUp();
    expect(await answerOf(two, "mine")).toBe("applied");
    one.keys.send(new Map([[PARTITION, [like("k1"), like("mine", PAGE, 2)]]]));
    await clock.advance(0);
    expect(await answerOf(two, "k1")).toBe('{"value":1,"updatedAt":5}');
    expect(await answerOf(two, "mine")).toBe("{}");
    // dc1's own message is not stored by dc1 (its store has its own keys already).
    expect(await answerOf(one, "k1")).toBe("applied");
    expect(await outcomes(one)).toEqual({ sent: 2 });
    expect(await outcomes(two)).toEqual({ stored: 2 });
  });

  test("counter - keys of a partition not held here, or of pages of another partition, are not stored", async () => {
    const { clock, one, two } = await setUp();
    two.state.fence = undefined;
    one.keys.send(new Map([[PARTITION, [like("k1")]]]));
    await clock.advance(0);
    expect(await outcomes(two)).toEqual({ not_held: 1 });
    two.state.fence = (await two.store.acquire(PARTITION, "dc2-node", KEY_TTL_MS))!;
    expect(await answerOf(two, "k1")).toBe("applied");
    // A sender's bug: a page of another partition under this partition's subject.
    one.keys.send(new Map([[PARTITION, [like("k2", ELSEWHERE)]]]));
    await clock.advance(0);
    expect(await answerOf(two, "k2", ELSEWHERE)).toBe("applied");
  });

  test("counter - a malformed message is dropped and what follows is stored", async () => {
    const { clock, bus, one, two } = await setUp();
    bus.publish(`lc.keys.${PARTITION}`, new Uint8Array([0xc1]));
    bus.publish(`lc.keys.${PARTITION}`, encodeMessage({ type: "ack" }));
    one.keys.send(new Map([[PARTITION, [like("k1")]]]));
    await clock.advance(0);
    expect(await answerOf(two, "k1")).toBe('{"value":1,"updatedAt":5}');
  });

  test("counter - nothing is sent while no other DC is heard, nor subscribed when turned off", async () => {
    const { one } = await setUp();
    expect(one.keys.sending).toBe(true);
    one.state.othersLive = false;
    expect(one.keys.sending).toBe(false);
    const off = await setUp(false);
    expect(off.one.keys.sending).toBe(false);
    off.one.keys.send(new Map([[PARTITION, [like("k1")]]]));
    await off.clock.advance(0);
    expect(await answerOf(off.two, "k1")).toBe("applied");
  });

  test("counter - RecentKeys hands over the keys the store applied, by partition, never replays or errors", async () => {
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
    const answer = (key: string, partition: number, reply: NodeReply = incremented) => ({
      pending: { actor: { partition }, request: request(key), resolve: () => {} },
      reply,
    });
    const record = (key: string): KeyRestore => incrementUse(request(key), incremented).record;
    const replayed: NodeReply = { ...incremented, duplicate: true };
    const failed: NodeReply = { type: "error", code: "unavailable", message: "store down" };
    await keys.settled(
      [answer("a", 1), answer("b", 2), answer("c", 1), answer("d", 1, replayed), answer("e", 1, failed)],
      0,
      incrementUse,
    );
    expect(sent).toEqual([
      new Map([
        [1, [record("a"), record("c")]],
        [2, [record("b")]],
      ]),
    ]);
    sending = false;
    await keys.settled([answer("f", 1)], 0, incrementUse);
    expect(sent).toHaveLength(1);
  });
});
