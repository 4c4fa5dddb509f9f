import { pageSubject } from "@livecount/bus";
import { VIEWERS_COUNTER, encodeMessage, transitionsOf, type PresenceOp } from "@livecount/protocol";
import { silentLogger } from "@livecount/runtime";
import { Registry } from "prom-client";
import { afterEach, describe, expect, test } from "vitest";
import { CounterMetrics } from "../src/counter_metrics.js";
import { Occupancy } from "../src/occupancy.js";
import { OccupancyRules } from "../src/occupancy_rules.js";
import { Replication } from "../src/replication.js";
import type { OccupancyEvent } from "../src/webhook_event.js";
import {
  DC,
  GRACE_MS,
  PASSIVATE_MS,
  SETTLE_MS,
  buildUnits,
  pageIn,
  presenceBatch,
  type Units,
} from "./units.js";

const REMOTE = "dc2";

describe("counter - occupancy", () => {
  let u: Units;
  afterEach(async () => u.close());

  /** Units whose registry reports to an Occupancy; `events` is what it sent, `live` the live DCs. */
  async function setUp(thresholds: number[] = []) {
    const events: OccupancyEvent[] = [];
    const holds: Array<[number, number]> = [];
    const live = new Set([DC, REMOTE]);
    const occupancy = new Occupancy({
      rules: new OccupancyRules(thresholds, 10),
      isLive: (dc) => live.has(dc),
      now: () => u.clock.now(),
      sink: { send: (e) => events.push(e), hold: (partition, until) => holds.push([partition, until]) },
    });
    u = await buildUnits({ occupancy });
    return { events, holds, live, occupancy };
  }

  /** What a receiver would need: type, viewers, threshold fields. */
  const brief = (events: readonly OccupancyEvent[]) =>
    events.map((e) =>
      e.type === "page.threshold"
        ? `${e.type} ${e.direction} ${e.threshold} @${e.viewers}`
        : `${e.type} @${e.viewers}`,
    );

  async function tickAfter(ms: number): Promise<void> {
    await u.clock.advance(ms);
    u.registry.tick(u.clock.monotonic());
  }

  test("counter - a first viewer makes page.occupied, a reload within the grace nothing, the departure page.vacated when the grace ends", async () => {
    const { events } = await setUp();
    const page = pageIn(1);
    await u.acquire(1);
    await u.intake.batch(presenceBatch(1, "gw-1", [[page, "v:1", true]]));
    expect(events).toEqual([{ type: "page.occupied", page, partition: 1, viewers: 1, ts: u.clock.now() }]);

    // A reload: the socket closes, the viewer comes back on a new one before the grace ends.
    await u.intake.batch(presenceBatch(1, "gw-1", [[page, "v:1", false]]));
    await tickAfter(GRACE_MS - 1);
    await u.intake.batch(presenceBatch(1, "gw-2", [[page, "v:1", true]]));
    await tickAfter(GRACE_MS * 2);
    expect(events).toHaveLength(1);

    await u.intake.batch(presenceBatch(1, "gw-2", [[page, "v:1", false]]));
    const left = u.clock.now();
    await tickAfter(GRACE_MS - 1);
    expect(events).toHaveLength(1);
    await tickAfter(1);
    expect(events[1]).toEqual({ type: "page.vacated", page, partition: 1, viewers: 0, ts: left + GRACE_MS });
  });

  test("counter - every transition is announced in order, however quickly they follow each other", async () => {
    const { events } = await setUp();
    const page = pageIn(2);
    await u.acquire(2);
    const drop: Omit<PresenceOp, "page"> = { viewer: "v:1", present: false, drop: true };
    for (let i = 0; i < 3; i++) {
      await u.intake.batch(presenceBatch(2, "gw-1", [[page, "v:1", true]]));
      await u.registry.run(page, 2, (actor) => actor.presenceTransitions("gw-1", transitionsOf([drop])));
    }
    expect(brief(events)).toEqual([
      "page.occupied @1",
      "page.vacated @0",
      "page.occupied @1",
      "page.vacated @0",
      "page.occupied @1",
      "page.vacated @0",
    ]);
  });

  test("counter - thresholds crossed by one batch are announced after page.occupied, in ascending order", async () => {
    const { events } = await setUp([2, 3]);
    const page = pageIn(3);
    await u.acquire(3);
    await u.intake.batch(
      presenceBatch(3, "gw-1", [
        [page, "v:1", true],
        [page, "v:2", true],
        [page, "v:3", true],
      ]),
    );
    expect(brief(events)).toEqual(["page.occupied @3", "page.threshold up 2 @3", "page.threshold up 3 @3"]);
    expect(new Set(events.map((e) => e.ts)).size).toBe(1);
  });

  test("counter - after a takeover, a page a previous owner left occupied is not announced again, and is vacated once the settle window ends with nobody back", async () => {
    const { events, holds } = await setUp();
    const [kept, left] = [pageIn(4, 0), pageIn(4, 1)];
    const old = await u.store.acquire(4, "node-old", 1);
    await u.store.write([
      {
        fence: old!,
        writes: [kept, left].map((page) => ({
          page,
          counter: VIEWERS_COUNTER,
          dc: DC,
          entry: { p: 1, n: 0 },
          indexed: true,
        })),
      },
    ]);
    await u.clock.advance(2);
    await u.acquire(4);
    expect(holds).toEqual([[4, u.clock.now() + SETTLE_MS]]);
    // Gateways resync: the viewer of `kept` is still there; nobody holds `left`'s.
    await u.intake.sync({ type: "presence_sync", gateway: "gw-1", partition: 4, pages: { [kept]: ["v:1"] } });
    await u.clock.advance(0);
    expect(u.registry.find(left)?.status).toBe("active");
    expect(events).toEqual([]);
    await tickAfter(SETTLE_MS);
    expect(events.map((e) => [e.page, e.type])).toEqual([[left, "page.vacated"]]);
  });

  test("counter - another DC's viewers load the page and count; the DC going down vacates it and coming back occupies it again", async () => {
    const { events, live, occupancy } = await setUp();
    const page = pageIn(5);
    await u.acquire(5);
    new Replication({
      dc: DC,
      bus: u.bus,
      logger: silentLogger,
      registry: u.registry,
      metrics: new CounterMetrics(new Registry(), {
        partitionsOwned: () => 1,
        partitionsBootstrapped: () => 1,
      }),
      writer: u.writer,
      leaseOf: (partition) => u.fences.get(partition),
    }).partitionHeld(5);
    const remote = (p: number, n: number) =>
      u.bus.publish(
        pageSubject(page, 5),
        encodeMessage({
          type: "update",
          ts: u.clock.now(),
          page,
          dc: REMOTE,
          counters: { [VIEWERS_COUNTER]: { p, n } },
        }),
      );
    remote(2, 0);
    await u.clock.advance(0);
    expect(brief(events)).toEqual(["page.occupied @2"]);

    // Nobody views it here, yet it stays in memory: a DC change must reach it.
    await u.clock.advance(PASSIVATE_MS * 2);
    u.registry.passivateIdle(u.clock.now());
    expect(u.registry.find(page)).toBeDefined();

    live.delete(REMOTE);
    occupancy.dcChanged();
    live.add(REMOTE);
    occupancy.dcChanged();
    remote(2, 2);
    await u.clock.advance(0);
    expect(brief(events)).toEqual([
      "page.occupied @2",
      "page.vacated @0",
      "page.occupied @2",
      "page.vacated @0",
    ]);

    // Empty everywhere, it may leave memory; loaded again, it starts where it stood.
    await u.clock.advance(PASSIVATE_MS * 2);
    u.registry.passivateIdle(u.clock.now());
    expect(u.registry.find(page)).toBeUndefined();
    expect(occupancy.size).toBe(0);
    await u.registry.run(page, 5, () => undefined);
    expect(events).toHaveLength(4);
  });

  test("counter - entries anti-entropy brings to a page in memory move its level like any other change", async () => {
    const { events } = await setUp();
    const page = pageIn(6);
    await u.acquire(6);
    await u.registry.run(page, 6, () => undefined);
    await u.registry.run(page, 6, (actor) =>
      actor.mergeDurable({ [VIEWERS_COUNTER]: { [REMOTE]: { p: 3, n: 0 } } }),
    );
    expect(brief(events)).toEqual(["page.occupied @3"]);
  });
});
