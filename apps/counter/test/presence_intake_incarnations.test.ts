/**
 * Gateway incarnations at a counter node's presence intake (units wired as the node wires them,
 * manual clock): a gateway restarted under its node id releases its predecessor, and what a NATS
 * server passes on late (from an incarnation released, or from a bus connection the gateway
 * replaced) never counts again, while a live gateway released by mistake is taken back.
 */
import { gatewaySubject } from "@livecount/bus";
import { CONNECTIONS_COUNTER, VIEWERS_COUNTER, holdCode, type PresenceSync } from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import {
  DC,
  GATEWAY_LEASE_MS,
  GRACE_MS,
  buildUnits,
  presenceBatch,
  sweepOnTime,
  pageIn,
  type Units,
} from "./units.js";

describe("counter - presence intake", () => {
  let u: Units;
  afterEach(async () => u.close());

  const viewers = (page: string): number => u.registry.find(page)?.value(VIEWERS_COUNTER) ?? 0;

  const sweepFor = (ms: number): Promise<void> => sweepOnTime(u, ms);

  const upBeat = (gateway: string, startedAt: number) =>
    u.intake.heartbeat({
      type: "gateway",
      gateway,
      node: "gw",
      startedAt,
      leaseMs: GATEWAY_LEASE_MS,
      state: "up",
    });
  const syncOf = (gateway: string, page: string, held: string[], reconnects?: number): PresenceSync => ({
    type: "presence_sync",
    gateway,
    partition: 3,
    pages: { [page]: held },
    ...(reconnects !== undefined ? { reconnects } : {}),
  });
  /** The incarnation answers probes on its own subject, as a running gateway does (with its reconnects). */
  const answerProbes = (gateway: string, reconnects?: number) =>
    u.bus.serve(gatewaySubject(DC, gateway), () => new TextEncoder().encode(reconnects?.toString() ?? ""));

  test("counter - a gateway restarted under the same node id releases its previous incarnation once that one misses a heartbeat, with the grace window", async () => {
    u = await buildUnits();
    const page = pageIn(3);
    await u.acquire(3);
    expect(upBeat("gw-old", 1)).toBe(true);
    await u.intake.batch(
      presenceBatch(3, "gw-old", [
        [page, "v:1", true],
        [page, "v:2", true],
      ]),
    );
    expect(upBeat("gw-old", 1)).toBe(false);
    // The restarted process: its first heartbeat is news. The old incarnation beat just now, so it
    // is not yet known to be dead.
    expect(upBeat("gw-new", 2)).toBe(true);
    await u.intake.batch(presenceBatch(3, "gw-new", [[page, "v:1", true]]));
    await u.clock.advance(0);
    expect(u.registry.find(page)?.value(CONNECTIONS_COUNTER)).toBe(3);
    // One and a half heartbeat intervals (a third of the lease each) without a beat: dead.
    await u.clock.advance(GATEWAY_LEASE_MS / 2);
    expect(upBeat("gw-new", 2)).toBe(false);
    await u.clock.advance(0);
    expect(viewers(page)).toBe(2);
    expect(u.registry.find(page)?.value(CONNECTIONS_COUNTER)).toBe(1);
    // v:2 did not come back: it lingers for the grace window, not for the old lease.
    await u.clock.advance(GRACE_MS);
    u.registry.tick(u.clock.now());
    expect(viewers(page)).toBe(1);
    expect(u.registry.find(page)?.value(CONNECTIONS_COUNTER)).toBe(1);
  });

  test("counter - a restarted gateway's predecessors are the other incarnations of its node; one found gone is released at once, with the grace window", async () => {
    u = await buildUnits();
    const page = pageIn(3);
    await u.acquire(3);
    const beat = (gateway: string, node: string, startedAt: number) =>
      u.intake.heartbeat({
        type: "gateway",
        gateway,
        node,
        startedAt,
        leaseMs: GATEWAY_LEASE_MS,
        state: "up",
      });
    beat("gw-old", "gw", 1);
    beat("other", "other-node", 0);
    await u.intake.batch(
      presenceBatch(3, "gw-old", [
        [page, "v:1", true],
        [page, "v:2", true],
      ]),
    );
    expect(u.intake.predecessors("gw-old")).toEqual([]);
    expect(beat("gw-new", "gw", 2)).toBe(true);
    expect(u.intake.predecessors("gw-new")).toEqual(["gw-old"]);
    expect(u.intake.predecessors("unknown")).toEqual([]);
    await u.intake.batch(presenceBatch(3, "gw-new", [[page, "v:1", true]]));
    await u.clock.advance(0);
    expect(u.registry.find(page)?.value(CONNECTIONS_COUNTER)).toBe(3);
    // The old incarnation beat just now: only a probe can tell it is gone, and did.
    u.intake.gone("gw-old");
    u.intake.gone("gw-old");
    await u.clock.advance(0);
    expect(viewers(page)).toBe(2);
    expect(u.registry.find(page)?.value(CONNECTIONS_COUNTER)).toBe(1);
    expect(u.intake.predecessors("gw-new")).toEqual([]);
    await u.clock.advance(GRACE_MS);
    u.registry.tick(u.clock.now());
    expect(viewers(page)).toBe(1);
    expect(u.registry.find(page)?.value(CONNECTIONS_COUNTER)).toBe(1);
  });

  test("counter - an earlier incarnation that still beats is a second process under the node id: it keeps its viewers", async () => {
    u = await buildUnits();
    const page = pageIn(3);
    await u.acquire(3);
    upBeat("gw-a", 1);
    upBeat("gw-b", 2);
    await u.intake.batch(presenceBatch(3, "gw-a", [[page, "v:a", true]]));
    await u.intake.batch(presenceBatch(3, "gw-b", [[page, "v:b", true]]));
    // Both beat every interval for several leases; sweeps run in between.
    for (let t = 0; t < 3 * GATEWAY_LEASE_MS; t += GATEWAY_LEASE_MS / 3) {
      await u.clock.advance(GATEWAY_LEASE_MS / 3);
      upBeat("gw-b", 2);
      upBeat("gw-a", 1);
      u.intake.sweep(u.clock.monotonic());
    }
    await u.clock.advance(GRACE_MS);
    u.registry.tick(u.clock.now());
    expect(viewers(page)).toBe(2);
    expect(u.intake.remembers(page)).toBe(true);
  });

  test("counter - presence a NATS server passed on late, from a bus connection the gateway has replaced since, is dropped: it neither holds a viewer nor renews the lease", async () => {
    u = await buildUnits();
    const page = pageIn(3);
    await u.acquire(3);
    // Sent before the gateway's bus moved (no reconnects yet), held by the frozen server.
    const held = presenceBatch(3, "gw", [[page, "v:ghost", true]]);
    // After the move: the resync over the new connection lists who is here now.
    await u.intake.sync({
      type: "presence_sync",
      gateway: "gw",
      partition: 3,
      pages: { [page]: ["v:1"] },
      reconnects: 1,
    });
    expect(viewers(page)).toBe(1);
    await u.clock.advance(GATEWAY_LEASE_MS / 2);
    // Current presence over the new connection, in both forms, is applied as ever.
    await u.intake.batch({ ...presenceBatch(3, "gw", [[page, "v:2", true]]), reconnects: 1 });
    await u.intake.pages({
      type: "presence_pages",
      gateway: "gw",
      partition: 3,
      pages: [[page, ["v:3", holdCode(1, true)]]],
      reconnects: 1,
    });
    await u.clock.advance(0);
    expect(viewers(page)).toBe(3);
    await u.clock.advance(GATEWAY_LEASE_MS / 2 - 1);
    // The thaw delivers the old batch, and an old sync: nothing changes, and the lease runs on.
    expect(await u.intake.batch(held)).toEqual({ type: "ack" });
    expect(
      await u.intake.sync({ type: "presence_sync", gateway: "gw", partition: 3, pages: { [page]: [] } }),
    ).toEqual({ type: "ack" });
    await u.clock.advance(0);
    expect(viewers(page)).toBe(3);
    const stale = await u.metricsRegistry.getSingleMetric("livecount_counter_presence_stale_total")!.get();
    expect(stale.values[0]!.value).toBe(2);
    // The lease ran from the last current request.
    await sweepFor(GATEWAY_LEASE_MS / 2);
    expect(viewers(page)).toBe(3);
    await sweepFor(1);
    expect(viewers(page)).toBe(0);
  });

  test("counter - presence and heartbeats a NATS server passes on late from an incarnation already released never count again, however it was released", async () => {
    const releases = {
      // Restarted: the new incarnation beats on, the old one has missed a beat.
      superseded: async () => {
        upBeat("gw-new", 2);
        await sweepFor(GATEWAY_LEASE_MS / 2);
        upBeat("gw-new", 2);
      },
      gone: async () => {
        upBeat("gw-new", 2);
        u.intake.gone("gw-old");
      },
      down: async () => {
        u.intake.heartbeat({ type: "gateway", gateway: "gw-old", leaseMs: GATEWAY_LEASE_MS, state: "down" });
      },
      lapsed: async () => sweepFor(GATEWAY_LEASE_MS),
    };
    for (const [how, release] of Object.entries(releases)) {
      u = await buildUnits();
      const page = pageIn(3);
      await u.acquire(3);
      upBeat("gw-old", 1);
      // Held back by a frozen NATS server, before the release.
      const late = [
        presenceBatch(3, "gw-old", [[page, "v:ghost", true]]),
        { ...presenceBatch(3, "gw-old", [[page, "v:ghost", true]]), reconnects: 4 },
      ];
      await u.intake.sync(syncOf("gw-old", page, ["v:1"]));
      // Another gateway holds a viewer throughout.
      u.intake.heartbeat({ type: "gateway", gateway: "keeper", leaseMs: 10 * GATEWAY_LEASE_MS, state: "up" });
      await u.intake.sync(syncOf("keeper", page, ["v:2"]));
      await release();
      await u.clock.advance(GRACE_MS);
      u.registry.tick(u.clock.now());
      expect(viewers(page), how).toBe(1);
      // The server thaws: nothing of the released incarnation counts, for longer than any lease.
      for (const batch of late) await u.intake.batch(batch);
      await u.intake.sync(syncOf("gw-old", page, ["v:ghost"], 9));
      expect(upBeat("gw-old", 1), how).toBe(false);
      await u.clock.advance(0);
      expect(viewers(page), how).toBe(1);
      expect(u.intake.predecessors("gw-new"), how).toEqual([]);
      for (let t = 0; t < 2 * GATEWAY_LEASE_MS; t += GATEWAY_LEASE_MS / 3) {
        await sweepFor(GATEWAY_LEASE_MS / 3);
        await u.intake.batch(presenceBatch(3, "gw-old", [[page, "v:ghost", true]]));
        expect(viewers(page), how).toBe(1);
      }
      await u.close();
    }
  });

  test("counter - a late heartbeat of a dead incarnation reporting a later start does not supersede the live one", async () => {
    u = await buildUnits();
    const page = pageIn(3);
    await u.acquire(3);
    // Restarted on a host whose clock stepped back: the live incarnation reports the earlier start.
    upBeat("gw-dead", 2);
    upBeat("gw-live", 1);
    answerProbes("gw-live");
    await u.intake.sync(syncOf("gw-live", page, ["v:1", "v:2"]));
    u.intake.gone("gw-dead");
    // The dead one's heartbeat, passed on late; then the live one misses a beat (a short stall).
    upBeat("gw-dead", 2);
    await sweepFor(GATEWAY_LEASE_MS / 2);
    upBeat("gw-live", 1);
    await u.clock.advance(GRACE_MS);
    u.registry.tick(u.clock.now());
    expect(viewers(page)).toBe(2);
  });

  test("counter - what a NATS server passes on late from a gateway taken back counts not, when it carries fewer reconnects than the gateway's answer", async () => {
    u = await buildUnits();
    const [page, ghostPage] = [pageIn(3), pageIn(3, 1)];
    await u.acquire(3);
    upBeat("gw", 1);
    await u.intake.sync(syncOf("gw", page, ["v:1"], 1));
    await sweepFor(GATEWAY_LEASE_MS);
    // It moved to another NATS server (its second reconnect); the frozen one thaws with its old batches.
    answerProbes("gw", 2);
    const late = { ...presenceBatch(3, "gw", [[ghostPage, "v:ghost", true]]), reconnects: 1 };
    expect(await u.intake.batch(late)).toMatchObject({ type: "error", code: "unavailable" });
    await u.clock.advance(0);
    expect(await u.intake.batch(late)).toEqual({ type: "ack" });
    expect(await u.intake.sync(syncOf("gw", page, ["v:1"], 2))).toEqual({ type: "ack" });
    await u.clock.advance(0);
    expect([viewers(page), viewers(ghostPage)]).toEqual([1, 0]);
  });

  test("counter - a live gateway released while it stalled or while its bus blipped is taken back once it answers a probe, and its resync counts", async () => {
    const releases = {
      lapsed: async () => sweepFor(GATEWAY_LEASE_MS),
      // Probed while its connection was down: no responder, taken for gone.
      gone: async () => u.intake.gone("gw"),
      superseded: async () => {
        upBeat("gw-late", 2);
        await sweepFor(GATEWAY_LEASE_MS / 2);
      },
    };
    for (const [how, release] of Object.entries(releases)) {
      for (const heardFirst of ["heartbeat", "sync"] as const) {
        u = await buildUnits();
        const page = pageIn(3);
        await u.acquire(3);
        upBeat("gw", 1);
        await u.intake.sync(syncOf("gw", page, ["v:1", "v:2"]));
        await release();
        await u.clock.advance(GRACE_MS);
        u.registry.tick(u.clock.now());
        expect(viewers(page), how).toBe(0);
        // It runs (again): it answers probes, beats, and resyncs, as after a stall or a reconnect.
        answerProbes("gw");
        if (heardFirst === "heartbeat") upBeat("gw", 1);
        const resync = syncOf("gw", page, ["v:1", "v:2"], how === "gone" ? 1 : undefined);
        if (heardFirst === "sync") {
          // Refused, retryably, until it proves it runs: the gateway sends it again.
          expect(await u.intake.sync(resync), how).toMatchObject({ type: "error", code: "unavailable" });
        }
        await u.clock.advance(0);
        expect(await u.intake.sync(resync), how).toEqual({ type: "ack" });
        upBeat("gw", 1);
        await u.clock.advance(0);
        expect(viewers(page), `${how} ${heardFirst}`).toBe(2);
        // Heard as ever from then on: its lease runs from its beats.
        for (let t = 0; t < 2 * GATEWAY_LEASE_MS; t += GATEWAY_LEASE_MS / 3) {
          await sweepFor(GATEWAY_LEASE_MS / 3);
          upBeat("gw", 1);
        }
        expect(viewers(page), how).toBe(2);
        await u.close();
      }
    }
  });
});
