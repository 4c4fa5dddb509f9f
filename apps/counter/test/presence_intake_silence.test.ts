import { VIEWERS_COUNTER } from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import {
  BUS_SILENCE_MS,
  GATEWAY_LEASE_MS,
  SWEEP_MS,
  buildUnits,
  pageIn,
  presenceBatch,
  sweepOnTime,
  type Units,
} from "./units.js";

/**
 * Silences that are not the gateways': the counter node's own stalls (its sweeps late) and the bus
 * bringing nothing (NATS down or frozen). No gateway lease lapses on them, and once they end each
 * lease gets back the part after its gateway was last heard.
 */
describe("counter - presence intake through silences", () => {
  let u: Units;
  afterEach(async () => u.close());

  const viewers = (page: string): number => u.registry.find(page)?.value(VIEWERS_COUNTER) ?? 0;
  const sweepFor = (ms: number): Promise<void> => sweepOnTime(u, ms);

  test("counter - a stall of the node is not silence of the gateways, but silence during regular sweeps is", async () => {
    u = await buildUnits();
    const page = pageIn(6);
    await u.acquire(6);
    u.intake.heartbeat({ type: "gateway", gateway: "gw", leaseMs: GATEWAY_LEASE_MS, state: "up" });
    await u.intake.batch(presenceBatch(6, "gw", [[page, "v:1", true]]));
    await sweepFor(SWEEP_MS * 3);
    // Frozen for five leases: the next sweep comes that late, and the gateway's beats wait in the socket.
    u.clock.jump(GATEWAY_LEASE_MS * 5);
    u.intake.sweep(u.clock.monotonic());
    expect(viewers(page)).toBe(1);
    // Sweeping on time while the gateway stays silent expires it.
    await sweepFor(GATEWAY_LEASE_MS);
    expect(viewers(page)).toBe(0);
  });

  /** A gateway holding one viewer on `page`, heard now. */
  async function oneViewer(partition: number): Promise<string> {
    const page = pageIn(partition);
    await u.acquire(partition);
    u.intake.heartbeat({ type: "gateway", gateway: "gw", leaseMs: GATEWAY_LEASE_MS, state: "up" });
    await u.intake.batch(presenceBatch(partition, "gw", [[page, "v:1", true]]));
    return page;
  }

  /** Sweeps on time until the page has no viewer; resolves with when that was. */
  async function sweepUntilDropped(page: string, withinMs: number): Promise<number> {
    const end = u.clock.now() + withinMs;
    while (viewers(page) > 0 && u.clock.now() < end) await sweepFor(SWEEP_MS);
    expect(viewers(page), `still counted after ${withinMs} ms`).toBe(0);
    return u.clock.now();
  }

  test("counter - silence of the bus is not silence of the gateways: no lease lapses while nothing comes, and the silence does not count against any lease", async () => {
    u = await buildUnits();
    await sweepFor(SWEEP_MS * 3);
    const page = await oneViewer(6);
    // NATS down or frozen for three leases, from right after the gateway's heartbeat: nothing comes,
    // the broker answers no round trip either; the node's sweeps run on time.
    u.busSilentSince = u.clock.monotonic();
    await sweepFor(GATEWAY_LEASE_MS * 3);
    expect(viewers(page)).toBe(1);
    // The bus carries again (the next sweep sees it), and the gateway stays silent: its lease runs on
    // from where the silence stopped it, whole.
    u.busSilentSince = undefined;
    await sweepFor(SWEEP_MS + GATEWAY_LEASE_MS - 1);
    expect(viewers(page)).toBe(1);
    await sweepFor(1);
    expect(viewers(page)).toBe(0);
  });

  test("counter - a gateway heard as the bus comes back gets none of the silence: killed then, it stops counting a lease later", async () => {
    u = await buildUnits();
    const page = await oneViewer(6);
    u.busSilentSince = u.clock.monotonic();
    await sweepFor(GATEWAY_LEASE_MS * 3);
    // Thawed: the gateway's queued heartbeat comes with the broker's answer, before the next sweep;
    // then the gateway dies.
    u.busSilentSince = undefined;
    const heardAt = u.clock.now();
    u.intake.heartbeat({ type: "gateway", gateway: "gw", leaseMs: GATEWAY_LEASE_MS, state: "up" });
    await sweepFor(GATEWAY_LEASE_MS - SWEEP_MS);
    expect(viewers(page)).toBe(1);
    const droppedAt = await sweepUntilDropped(page, GATEWAY_LEASE_MS * 2);
    expect(droppedAt - heardAt).toBeLessThanOrEqual(GATEWAY_LEASE_MS + 2 * SWEEP_MS);
  });

  test("counter - sweeps all late (a loaded process) still let a silent gateway's lease lapse", async () => {
    u = await buildUnits();
    const page = await oneViewer(6);
    const lateBy = 3 * SWEEP_MS;
    const start = u.clock.now();
    while (viewers(page) > 0 && u.clock.now() - start < GATEWAY_LEASE_MS * 10) {
      await u.clock.advance(lateBy);
      u.intake.sweep(u.clock.monotonic());
    }
    // Each late sweep counts only a sweep interval of its gap against the lease.
    expect(viewers(page)).toBe(0);
    expect(u.clock.now() - start).toBeGreaterThanOrEqual(GATEWAY_LEASE_MS);
    expect(u.clock.now() - start).toBeLessThanOrEqual((GATEWAY_LEASE_MS * lateBy) / SWEEP_MS + lateBy);
  });

  test("counter - a stall of the process inside a silence of the bus is not counted twice", async () => {
    u = await buildUnits();
    const page = await oneViewer(6);
    // Half the lease goes by before the bus falls silent; the process stalls inside the silence.
    await sweepFor(GATEWAY_LEASE_MS / 2);
    u.busSilentSince = u.clock.monotonic();
    await sweepFor(SWEEP_MS * 10);
    u.clock.jump(GATEWAY_LEASE_MS * 5);
    u.intake.sweep(u.clock.monotonic());
    await sweepFor(SWEEP_MS * 10);
    u.busSilentSince = undefined;
    const backAt = u.clock.now();
    // The other half is left from the bus's return, not more.
    const droppedAt = await sweepUntilDropped(page, GATEWAY_LEASE_MS * 10);
    expect(droppedAt - backAt).toBeGreaterThanOrEqual(GATEWAY_LEASE_MS / 2 - SWEEP_MS);
    expect(droppedAt - backAt).toBeLessThanOrEqual(GATEWAY_LEASE_MS / 2 + 2 * SWEEP_MS);
  });

  test("counter - a pause of the bus shorter than its silence bound postpones no lease", async () => {
    u = await buildUnits();
    const page = await oneViewer(6);
    await sweepFor(GATEWAY_LEASE_MS / 2);
    u.busSilentSince = u.clock.monotonic();
    await sweepFor(BUS_SILENCE_MS);
    u.busSilentSince = undefined;
    await sweepFor(GATEWAY_LEASE_MS / 2 - BUS_SILENCE_MS - 1);
    expect(viewers(page)).toBe(1);
    await sweepFor(1);
    expect(viewers(page)).toBe(0);
  });
});
