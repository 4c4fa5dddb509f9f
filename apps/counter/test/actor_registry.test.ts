import { VIEWERS_COUNTER } from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import { ActorClosedError } from "../src/page_actor.js";
import {
  COALESCE_MS,
  DC,
  GRACE_MS,
  MAX_ACTORS,
  PARTITIONS,
  PASSIVATE_MS,
  SETTLE_MS,
  buildUnits,
  presenceBatch,
  pageIn,
  type Units,
} from "./units.js";

describe("counter - actor registry", () => {
  let u: Units;
  afterEach(async () => u.close());

  /** Everywhere a page can be remembered on a node. */
  function remembered(page: string): string[] {
    const where: string[] = [];
    const actor = u.registry.find(page);
    if (actor !== undefined) where.push("registry");
    // Its partition's actors name it exactly when the registry holds it.
    for (let partition = 0; partition < PARTITIONS; partition++)
      if (u.registry.actorsIn(partition).some((a) => a.page === page)) {
        expect(actor?.partition).toBe(partition);
        where.push("partition");
      }
    if (u.intake.remembers(page)) where.push("gateway leases");
    return where;
  }

  test("counter - a lost partition leaves none of its pages in any collection, and other partitions keep theirs", async () => {
    u = await buildUnits();
    const [a, b, other] = [pageIn(1, 0), pageIn(1, 1), pageIn(2, 0)];
    await u.acquire(1);
    await u.acquire(2);
    await u.intake.batch(
      presenceBatch(1, "gw-1", [
        [a, "v:1", true],
        [b, "v:2", true],
      ]),
    );
    await u.intake.batch(presenceBatch(2, "gw-1", [[other, "v:3", true]]));
    // v:2 leaves: it lingers, so its actor has a deadline; nothing was flushed yet, so it is dirty.
    await u.intake.batch(presenceBatch(1, "gw-1", [[b, "v:2", false]]));
    const actorA = u.registry.find(a)!;
    expect(u.writer.dirtyCount).toBe(3);
    expect(u.registry.scheduled).toBe(1);
    expect(remembered(a)).toEqual(["registry", "partition", "gateway leases"]);

    u.registry.dropPartition(1, "partition_lost");

    expect(remembered(a)).toEqual([]);
    expect(remembered(b)).toEqual([]);
    expect(actorA.status).toBe("closed");
    expect(u.registry.scheduled).toBe(0);
    expect(u.writer.dirtyCount).toBe(1);
    expect(remembered(other)).toEqual(["registry", "partition", "gateway leases"]);
    expect(u.registry.actorsIn(1)).toEqual([]);
  });

  test("counter - passivation leaves no trace of an idle page, and waits while its write is in flight", async () => {
    u = await buildUnits();
    const page = pageIn(3);
    await u.acquire(3);
    await u.intake.batch(presenceBatch(3, "gw-1", [[page, "v:1", true]]));
    await u.intake.batch(presenceBatch(3, "gw-1", [[page, "v:1", false]]));
    expect(remembered(page)).toEqual(["registry", "partition", "gateway leases"]);

    // The grace ends and the flush that writes the departure hangs in the store.
    let release!: () => void;
    u.store.hold = new Promise((r) => (release = r));
    await u.clock.advance(GRACE_MS);
    u.registry.tick(u.clock.monotonic());
    await u.clock.advance(COALESCE_MS);
    await u.clock.advance(PASSIVATE_MS);
    u.registry.passivateIdle(u.clock.now());
    expect(u.registry.find(page)?.status).toBe("active");

    release();
    u.store.hold = undefined;
    await u.clock.advance(0);
    expect(u.published.at(-1)?.counters[VIEWERS_COUNTER]).toEqual({ p: 1, n: 1 });
    u.registry.passivateIdle(u.clock.now());
    expect(remembered(page)).toEqual([]);
    expect(u.registry.size).toBe(0);
    expect(u.registry.scheduled).toBe(0);
    expect(u.writer.dirtyCount).toBe(0);
  });

  test("counter - an actor with viewers or untouched for less than the passivation time stays", async () => {
    u = await buildUnits();
    const [held, recent] = [pageIn(4, 0), pageIn(4, 1)];
    await u.acquire(4);
    await u.intake.batch(presenceBatch(4, "gw-1", [[held, "v:1", true]]));
    await u.clock.advance(PASSIVATE_MS);
    await u.registry.run(recent, 4, () => undefined);
    await u.clock.advance(PASSIVATE_MS - 1);
    u.registry.passivateIdle(u.clock.now());
    expect(u.registry.find(held)).toBeDefined();
    expect(u.registry.find(recent)).toBeDefined();
    await u.clock.advance(1);
    u.registry.passivateIdle(u.clock.now());
    expect(u.registry.find(held)).toBeDefined();
    expect(u.registry.find(recent)).toBeUndefined();
  });

  test("counter - a page whose load fails is torn down like any other, and loads again on the next request", async () => {
    u = await buildUnits();
    const page = pageIn(5);
    await u.acquire(5);
    u.store.failLoads = 1;
    await expect(u.registry.run(page, 5, () => "ran")).rejects.toBeInstanceOf(ActorClosedError);
    expect(remembered(page)).toEqual([]);
    await expect(u.registry.run(page, 5, () => "ran")).resolves.toBe("ran");
  });

  test("counter - a stored entry no replica may hold (past 2^53 - 1) fails the page's load, not the process", async () => {
    u = await buildUnits();
    const page = pageIn(5);
    await u.acquire(5);
    const load = u.store.loadExcept.bind(u.store);
    u.store.loadExcept = async (p, prefixes) =>
      p === page ? { likes: { [DC]: { p: Number.MAX_SAFE_INTEGER + 2, n: 0 } } } : load(p, prefixes);
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown): number => unhandled.push(err);
    process.on("unhandledRejection", onUnhandled);
    try {
      await expect(u.registry.run(page, 5, () => "ran")).rejects.toBeInstanceOf(ActorClosedError);
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
      expect(remembered(page)).toEqual([]);
      // Every other page is served as before.
      await expect(u.registry.run(pageIn(5, 1), 5, () => "ran")).resolves.toBe("ran");
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });

  test("counter - after a takeover, stored viewers are held until the settle window ends, then follow presence", async () => {
    u = await buildUnits();
    const page = pageIn(6);
    // A previous owner left 5 viewers counted in the store.
    const old = await u.store.acquire(6, "node-old", 1);
    await u.store.write([
      { fence: old!, writes: [{ page, counter: VIEWERS_COUNTER, dc: DC, entry: { p: 5, n: 0 } }] },
    ]);
    await u.clock.advance(2);
    await u.acquire(6);
    await u.intake.batch(presenceBatch(6, "gw-1", [[page, "v:1", true]]));
    expect(u.registry.find(page)!.ownEntry(VIEWERS_COUNTER)).toEqual({ p: 5, n: 0 });
    await u.clock.advance(SETTLE_MS - 1);
    u.registry.tick(u.clock.monotonic());
    expect(u.registry.find(page)!.ownEntry(VIEWERS_COUNTER)).toEqual({ p: 5, n: 0 });
    await u.clock.advance(1);
    u.registry.tick(u.clock.monotonic());
    expect(u.registry.find(page)!.ownEntry(VIEWERS_COUNTER)).toEqual({ p: 5, n: 4 });
  });
  test("counter - a wall clock stepping back holds neither a departed viewer's grace nor a settle window longer", async () => {
    u = await buildUnits();
    const [held, left] = [pageIn(7, 0), pageIn(7, 1)];
    const old = await u.store.acquire(7, "node-old", 1);
    await u.store.write([
      { fence: old!, writes: [{ page: held, counter: VIEWERS_COUNTER, dc: DC, entry: { p: 5, n: 0 } }] },
    ]);
    await u.clock.advance(2);
    await u.acquire(7);
    await u.intake.batch(
      presenceBatch(7, "gw-1", [
        [held, "v:1", true],
        [left, "v:2", true],
      ]),
    );
    await u.intake.batch(presenceBatch(7, "gw-1", [[left, "v:2", false]]));
    u.clock.stepWall(-60_000);
    await u.clock.advance(Math.max(GRACE_MS, SETTLE_MS));
    u.registry.tick(u.clock.monotonic());
    expect(u.registry.find(left)!.viewers).toBe(0);
    expect(u.registry.find(held)!.ownEntry(VIEWERS_COUNTER)).toEqual({ p: 5, n: 4 });
  });

  test("counter - a load that fails after its partition was lost and taken back leaves the new actor's leases alone", async () => {
    u = await buildUnits();
    const page = pageIn(7);
    await u.acquire(7);
    u.store.holdLoads = true;
    const first = u.registry.get(page, 7);
    await u.clock.advance(0);
    u.registry.dropPartition(7, "partition_lost");
    await u.acquire(7);
    u.store.holdLoads = false;
    u.intake.heartbeat({ type: "gateway", gateway: "gw", leaseMs: 60_000, state: "up" });
    await u.intake.batch(presenceBatch(7, "gw", [[page, "v:1", true]]));
    const second = u.registry.find(page)!;
    expect(second).not.toBe(first);
    // The first actor's load fails only now.
    u.store.heldLoads.splice(0).forEach((l) => l.fail(new Error("late")));
    await u.clock.advance(0);
    expect(u.registry.find(page)).toBe(second);
    expect(remembered(page)).toEqual(["registry", "partition", "gateway leases"]);
  });

  test("counter - an actor with an increment waiting for the commit chain is never passivated", async () => {
    u = await buildUnits();
    const [stuck, page] = [pageIn(0, 0), pageIn(0, 1)];
    await u.acquire(0);
    let release!: () => void;
    u.store.holdIncrements = new Promise((r) => (release = r));
    const increment = (p: string, key: string) =>
      u.registry.run(p, 0, (actor) =>
        u.writer.increment(actor, { type: "increment", page: p, counter: "likes", delta: 1, key }),
      );
    const first = increment(stuck, "a");
    await u.clock.advance(0);
    // Queued behind the stuck batch on the commit chain.
    const second = increment(page, "b");
    await u.clock.advance(PASSIVATE_MS * 2);
    u.registry.passivateIdle(u.clock.now());
    expect(u.registry.find(page)?.status).toBe("active");
    u.store.holdIncrements = undefined;
    release();
    await u.clock.advance(0);
    expect(await first).toMatchObject({ type: "incremented" });
    expect(await second).toMatchObject({ type: "incremented", value: 1 });
    await u.clock.advance(PASSIVATE_MS);
    u.registry.passivateIdle(u.clock.now());
    expect(u.registry.find(page)).toBeUndefined();
  });
  test("counter - a read of a page not in memory comes from the store and brings nothing into memory", async () => {
    u = await buildUnits();
    const [cold, hot] = [pageIn(1, 0), pageIn(1, 1)];
    await u.acquire(1);
    await u.store.write([
      {
        fence: u.fences.get(1)!,
        writes: [{ page: cold, counter: "likes", dc: "dc2", entry: { p: 4, n: 1 } }],
      },
    ]);
    for (let i = 0; i < 50; i++)
      expect(await u.registry.read(`${cold}`, 1)).toEqual({ likes: { dc2: { p: 4, n: 1 } } });
    expect(await u.registry.read(pageIn(1, 2), 1)).toEqual({});
    expect(u.registry.size).toBe(0);
    await u.intake.batch(presenceBatch(1, "gw", [[hot, "v:1", true]]));
    // In memory, the actor answers: what it holds may be ahead of the store by a window.
    expect((await u.registry.read(hot, 1))[VIEWERS_COUNTER]).toEqual({ [DC]: { p: 1, n: 0 } });
  });

  test("counter - past the actor cap the least recently used idle actors leave, never one with viewers", async () => {
    u = await buildUnits();
    await u.acquire(2);
    const viewed = Array.from({ length: 20 }, (_, i) => pageIn(2, i));
    await u.intake.batch(
      presenceBatch(
        2,
        "gw",
        viewed.map((p) => [p, "v:1", true] as const),
      ),
    );
    for (let i = 20; i < MAX_ACTORS + 100; i++) {
      await u.registry.run(pageIn(2, i), 2, () => undefined);
      await u.clock.advance(1);
    }
    expect(u.registry.size).toBeLessThanOrEqual(MAX_ACTORS);
    for (const page of viewed) expect(u.registry.find(page), page).toBeDefined();
    // The most recent idle actors are the ones kept.
    expect(u.registry.find(pageIn(2, MAX_ACTORS + 99))).toBeDefined();
    expect(u.registry.find(pageIn(2, 20))).toBeUndefined();
  });

  test("counter - with every actor busy past the cap, room is looked for again only after a tenth of the cap more, not for every new page", async () => {
    u = await buildUnits();
    await u.acquire(2);
    // One page more than the cap, every one with a viewer: nothing can leave.
    const viewed = Array.from({ length: MAX_ACTORS + 1 }, (_, i) => pageIn(2, i));
    await u.intake.batch(
      presenceBatch(
        2,
        "gw",
        viewed.map((p) => [p, "v:1", true] as const),
      ),
    );
    expect(u.registry.size).toBe(MAX_ACTORS + 1);
    // Idle pages arrive. Looking for room for each would scan every actor per page (quadratic, a
    // stalled node at scale): they are let in until the registry has grown by a tenth of the cap.
    const step = Math.ceil(MAX_ACTORS / 10);
    const idle = Array.from({ length: step }, (_, i) => pageIn(2, MAX_ACTORS + 1 + i));
    for (const page of idle.slice(0, -1)) await u.registry.run(page, 2, () => undefined);
    expect(u.registry.size).toBe(MAX_ACTORS + step);
    for (const page of idle.slice(0, -1)) expect(u.registry.find(page), page).toBeDefined();
    // The next one triggers the scan: every idle actor leaves, no page with a viewer does.
    await u.registry.run(idle.at(-1)!, 2, () => undefined);
    for (const page of idle.slice(0, -1)) expect(u.registry.find(page), page).toBeUndefined();
    for (const page of viewed) expect(u.registry.find(page), page).toBeDefined();
    expect(u.registry.size).toBe(MAX_ACTORS + 2);
  });

  test("counter - a page whose own presence entry is gone starts it at the partition's presence floor", async () => {
    u = await buildUnits();
    const [first, again] = [pageIn(3, 0), pageIn(3, 1)];
    await u.acquire(3);
    await comeAndGo(u, first, 5);
    expect((await u.store.load(first))[VIEWERS_COUNTER]?.[DC]).toEqual({ p: 5, n: 5 });
    expect(await u.store.presenceFloor(3)).toBe(5);
    // Another page, never seen: its own entry starts above anything this DC ever held here.
    await u.intake.batch(presenceBatch(3, "gw", [[again, "v:x", true]]));
    expect(u.registry.find(again)!.ownEntry(VIEWERS_COUNTER)).toEqual({ p: 6, n: 5 });
  });

  test("counter - floors that could not be read while the lease had run out here are read again once it is renewed", async () => {
    u = await buildUnits();
    const [first, again] = [pageIn(3, 0), pageIn(3, 1)];
    const fence = await u.acquire(3);
    await comeAndGo(u, first, 5);
    expect(await u.store.presenceFloor(3)).toBe(5);
    // Taken again (a later tenure); as it starts serving, its lease runs out here and the floor
    // read fails. A late renewal keeps the partition: the read is tried again.
    u.registry.dropPartition(3, "partition_lost");
    u.fences.delete(3);
    u.store.failFloors = 1;
    u.registry.partitionServing(3);
    await u.clock.advance(0);
    u.fences.set(3, fence);
    await u.clock.advance(1_000);
    await u.intake.batch(presenceBatch(3, "gw", [[again, "v:x", true]]));
    expect(u.registry.find(again)!.ownEntry(VIEWERS_COUNTER)).toEqual({ p: 6, n: 5 });
  });
});

/** Viewers come and go on one page of partition 3, one after another: the partition's floor rises with its entry. */
async function comeAndGo(u: Units, page: string, viewers: number): Promise<void> {
  for (let i = 0; i < viewers; i++) {
    await u.intake.batch(presenceBatch(3, "gw", [[page, `v:${i}`, true]]));
    await u.intake.batch(presenceBatch(3, "gw", [[page, `v:${i}`, false]]));
  }
  await u.clock.advance(GRACE_MS);
  u.registry.tick(u.clock.monotonic());
  await u.clock.advance(COALESCE_MS);
}
