/**
 * The presence intake of a counter node (units wired as the node wires them, manual clock): gateway
 * leases and leaves with the grace window, syncs that replace what a gateway held, unvisited
 * viewers, and batches refused or too late. Restarted gateways and presence a NATS server passes on
 * late are in presence_intake_incarnations.test.ts; silences that are not the gateways' in
 * presence_intake_silence.test.ts.
 */
import { CONNECTIONS_COUNTER, VIEWERS_COUNTER, holdCode } from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import {
  GATEWAY_LEASE_MS,
  GRACE_MS,
  buildUnits,
  presenceBatch,
  sweepOnTime,
  pageIn,
  type Units,
} from "./units.js";

const DAY_MS = 86_400_000;

describe("counter - presence intake", () => {
  let u: Units;
  afterEach(async () => u.close());

  const viewers = (page: string): number => u.registry.find(page)?.value(VIEWERS_COUNTER) ?? 0;

  /** Lets `ms` pass with the node's sweep running on time. */
  const sweepFor = (ms: number): Promise<void> => sweepOnTime(u, ms);

  test("counter - a gateway not heard for its lease loses its viewers at once, without grace", async () => {
    u = await buildUnits();
    const page = pageIn(1);
    await u.acquire(1);
    u.intake.heartbeat({ type: "gateway", gateway: "dead", leaseMs: GATEWAY_LEASE_MS, state: "up" });
    u.intake.heartbeat({ type: "gateway", gateway: "live", leaseMs: GATEWAY_LEASE_MS * 10, state: "up" });
    await u.intake.batch(
      presenceBatch(1, "dead", [
        [page, "v:1", true],
        [page, "v:2", true],
      ]),
    );
    await u.intake.batch(
      presenceBatch(1, "live", [
        [page, "v:2", true],
        [page, "v:3", true],
      ]),
    );
    expect(viewers(page)).toBe(3);
    await sweepFor(GATEWAY_LEASE_MS - 1);
    expect(viewers(page)).toBe(3);
    await sweepFor(1);
    // v:2 is still held by the live gateway; v:1 goes at once, not after a grace.
    expect(viewers(page)).toBe(2);
    expect(u.intake.remembers(page)).toBe(true);
  });

  test("counter - a gateway going down lets its viewers linger for the grace window", async () => {
    u = await buildUnits();
    const page = pageIn(2);
    await u.acquire(2);
    await u.intake.batch(presenceBatch(2, "gw", [[page, "v:1", true]]));
    u.intake.heartbeat({ type: "gateway", gateway: "gw", leaseMs: GATEWAY_LEASE_MS, state: "down" });
    await u.clock.advance(0);
    expect(viewers(page)).toBe(1);
    await u.clock.advance(GRACE_MS);
    u.registry.tick(u.clock.now());
    expect(viewers(page)).toBe(0);
    expect(u.intake.remembers(page)).toBe(false);
  });

  test("counter - a sync clears what the same gateway's earlier batch or sync holds on a page still loading", async () => {
    for (const first of ["batch", "sync"] as const) {
      u = await buildUnits();
      const page = pageIn(3);
      await u.acquire(3);
      u.store.holdLoads = true;
      // The earlier request's work waits in the loading actor's mailbox when the sync arrives.
      const earlier =
        first === "batch"
          ? u.intake.batch(presenceBatch(3, "gw", [[page, "v:1", true]]))
          : u.intake.sync({ type: "presence_sync", gateway: "gw", partition: 3, pages: { [page]: ["v:1"] } });
      const later = u.intake.sync({ type: "presence_sync", gateway: "gw", partition: 3, pages: {} });
      u.store.holdLoads = false;
      for (const held of u.store.heldLoads.splice(0)) held.release();
      await Promise.all([earlier, later]);
      await u.clock.advance(GRACE_MS);
      u.registry.tick(u.clock.now());
      expect(viewers(page), first).toBe(0);
      expect(u.registry.find(page)?.value(CONNECTIONS_COUNTER) ?? 0, first).toBe(0);
      if (first === "batch") await u.close();
    }
  });

  test("counter - a sync replaces what the gateway held, on pages it no longer lists too", async () => {
    u = await buildUnits();
    const [a, b] = [pageIn(3, 0), pageIn(3, 1)];
    await u.acquire(3);
    await u.intake.batch(
      presenceBatch(3, "gw", [
        [a, "v:1", true],
        [b, "v:2", true],
      ]),
    );
    await u.intake.sync({
      type: "presence_sync",
      gateway: "gw",
      partition: 3,
      pages: { [a]: ["v:1", "v:3"] },
    });
    expect(viewers(a)).toBe(2);
    // v:2 on b lingers like any leave.
    await u.clock.advance(GRACE_MS);
    u.registry.tick(u.clock.now());
    expect(viewers(b)).toBe(0);
  });

  test("counter - viewers a batch or a resync names unvisited count as viewers and raise no unique-visitor register", async () => {
    u = await buildUnits();
    const [batched, synced, plain] = [pageIn(3, 0), pageIn(3, 1), pageIn(3, 2)];
    await u.acquire(3);
    const ids = Array.from({ length: 20 }, (_, i) => `v:${i}`);
    const registers = (page: string): number => u.registry.find(page)!.registersWaiting;
    await u.intake.pages({
      type: "presence_pages",
      gateway: "gw",
      partition: 3,
      pages: [[batched, ids.flatMap((viewer) => [viewer, holdCode(1, true)])]],
      unvisited: [[batched, ids]],
    });
    // A resync (to a new owner, say) of a gateway where half of them joined past their budget.
    await u.intake.sync({
      type: "presence_sync",
      gateway: "gw2",
      partition: 3,
      pages: { [synced]: ids, [plain]: ids },
      unvisited: { [synced]: ids.slice(10) },
    });
    for (const page of [batched, synced, plain]) expect(viewers(page), page).toBe(20);
    expect(registers(batched)).toBe(0);
    expect(registers(plain)).toBe(20);
    expect(registers(synced)).toBe(10);

    // The next day everyone present is a visitor of that day again, but for those same viewers.
    await u.clock.advance(0);
    for (const page of [batched, synced, plain]) expect(registers(page), `${page} flushed`).toBe(0);
    await u.clock.advance(DAY_MS);
    await u.intake.pages({
      type: "presence_pages",
      gateway: "gw",
      partition: 3,
      pages: [batched, synced, plain].map((page) => [page, ["v:next-day", holdCode(1, true)]]),
    });
    expect(registers(batched)).toBe(1);
    expect(registers(synced)).toBe(11);
    expect(registers(plain)).toBe(21);
  });

  test("counter - a batch naming a page of another partition is refused whole", async () => {
    u = await buildUnits();
    const [mine, foreign] = [pageIn(4), pageIn(5)];
    await u.acquire(4);
    const reply = await u.intake.batch(
      presenceBatch(4, "gw", [
        [mine, "v:1", true],
        [foreign, "v:2", true],
      ]),
    );
    expect(reply).toMatchObject({ type: "error", code: "bad_frame" });
    expect(u.registry.size).toBe(0);
    const sync = await u.intake.sync({
      type: "presence_sync",
      gateway: "gw",
      partition: 4,
      pages: { [foreign]: ["v"] },
    });
    expect(sync).toMatchObject({ type: "error", code: "bad_frame" });
  });

  test("counter - a batch that lands after its gateway went down adds no viewers", async () => {
    u = await buildUnits();
    const page = pageIn(7);
    await u.acquire(7);
    u.store.holdLoads = true;
    const late = u.intake.batch(presenceBatch(7, "gw", [[page, "v:1", true]]));
    await u.clock.advance(0);
    u.intake.heartbeat({ type: "gateway", gateway: "gw", leaseMs: GATEWAY_LEASE_MS, state: "down" });
    u.store.holdLoads = false;
    u.store.heldLoads.splice(0).forEach((l) => l.release());
    await late;
    expect(viewers(page)).toBe(0);
    expect(u.intake.remembers(page)).toBe(false);
  });
});
