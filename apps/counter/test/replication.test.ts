import { pageSubject } from "@livecount/bus";
import { encodeMessage, type PageUpdate } from "@livecount/protocol";
import { silentLogger } from "@livecount/runtime";
import { afterEach, describe, expect, test } from "vitest";
import { Registry } from "prom-client";
import { CounterMetrics } from "../src/counter_metrics.js";
import { Replication } from "../src/replication.js";
import { DC, buildUnits, pageIn, type Units } from "./units.js";

describe("counter - replication", () => {
  let u: Units;
  afterEach(async () => u.close());

  /** Units with partition `p` held and replicated; `send` publishes an update as another node would. */
  async function setUp(p: number) {
    u = await buildUnits();
    await u.acquire(p);
    const metrics = new CounterMetrics(new Registry(), {
      partitionsOwned: () => 1,
      partitionsBootstrapped: () => 1,
    });
    // The lease as the node holds it: it stays while the fence the node serves under ran out.
    const leases = new Map(u.fences);
    const replication = new Replication({
      dc: DC,
      bus: u.bus,
      logger: silentLogger,
      registry: u.registry,
      metrics,
      writer: u.writer,
      leaseOf: (partition) => leases.get(partition),
    });
    replication.partitionHeld(p);
    const send = async (update: Omit<PageUpdate, "type" | "ts">): Promise<void> => {
      u.bus.publish(
        pageSubject(update.page, p),
        encodeMessage({ type: "update", ts: u.clock.now() - 1500, ...update }),
      );
      await u.clock.advance(0);
    };
    return { replication, send, metrics, leases };
  }

  test("counter - another DC's entries of a page not in memory are written to the store, without an actor", async () => {
    const page = pageIn(3);
    const { send } = await setUp(3);
    await send({ page, dc: "dc2", counters: { likes: { p: 4, n: 1 } } });
    expect(await u.store.load(page)).toEqual({ likes: { dc2: { p: 4, n: 1 } } });
    expect(u.registry.find(page)).toBeUndefined();
  });

  test("counter - the age of the latest update from each DC is its replication lag", async () => {
    const { send, metrics } = await setUp(3);
    await send({ page: pageIn(3), dc: "dc2", counters: { likes: { p: 1, n: 0 } } });
    expect((await metrics.replicationLag.get()).values).toEqual([{ labels: { dc: "dc2" }, value: 1.5 }]);
  });

  test("counter - this DC's own entries on the page subject are not written again", async () => {
    const page = pageIn(3);
    const { send } = await setUp(3);
    await send({ page, dc: DC, counters: { likes: { p: 4, n: 0 } } });
    expect(u.timeline.filter((e) => e.startsWith("write:"))).toEqual([]);
    expect(await u.store.load(page)).toEqual({});
  });

  test("counter - an update that comes while the lease has run out here is merged under it: the store fences it", async () => {
    const page = pageIn(3);
    const { send, leases } = await setUp(3);
    // Run out here (a stall): the node serves nothing of the partition, and nobody took it.
    u.fences.delete(3);
    await send({ page, dc: "dc2", counters: { likes: { p: 4, n: 1 } } });
    expect(await u.store.load(page)).toEqual({ likes: { dc2: { p: 4, n: 1 } } });
    // Taken by another node meanwhile: the store refuses the stale lease, and nothing is written.
    const taken = await u.store.acquire(3, "node-b", 3_600_000, { reclaimFrom: "node-a" });
    expect(taken?.epoch).toBeGreaterThan(leases.get(3)!.epoch);
    await send({ page, dc: "dc2", counters: { likes: { p: 9, n: 1 } } });
    expect(await u.store.load(page)).toEqual({ likes: { dc2: { p: 4, n: 1 } } });
  });

  test("counter - an update on a subject not its page's is dropped", async () => {
    const page = pageIn(3);
    const { send } = await setUp(3);
    u.bus.publish(
      pageSubject(pageIn(3, 1), 3),
      encodeMessage({ type: "update", ts: 1, page, dc: "dc2", counters: { likes: { p: 1, n: 0 } } }),
    );
    await u.clock.advance(0);
    await send({ page: pageIn(3, 2), dc: "dc2", counters: { likes: { p: 1, n: 0 } } });
    expect(await u.store.load(page)).toEqual({});
  });
});
