/**
 * A gateway's resync too large for one message comes in parts (PresenceSyncPart): the owner applies
 * nothing until it has the last, then all of them as one sync. Units wired as the node wires them,
 * manual clock.
 */
import { CONNECTIONS_COUNTER, VIEWERS_COUNTER, type PresenceSyncPart } from "@livecount/protocol";
import { afterEach, describe, expect, test } from "vitest";
import { STALE_MS } from "../src/sync_parts.js";
import { buildUnits, pageIn, presenceBatch, type Units } from "./units.js";

const PARTITION = 4;

describe("counter - a resync in parts", () => {
  let u: Units;
  afterEach(async () => u.close());

  const value = (page: string, counter = VIEWERS_COUNTER): number =>
    u.registry.find(page)?.value(counter) ?? 0;
  const [a, b] = [pageIn(PARTITION, 0), pageIn(PARTITION, 1)];

  /** Part `part` of 3 of gateway "gw"'s resync of the partition. */
  const part = (
    n: number,
    fields: Pick<PresenceSyncPart, "pages" | "sockets" | "passive">,
  ): PresenceSyncPart => ({
    type: "presence_sync_part",
    gateway: "gw",
    partition: PARTITION,
    part: n,
    parts: 3,
    ...fields,
  });

  test("counter - nothing is applied before the last part, then everything at once: no viewer of a later part leaves in between, with no grace window either", async () => {
    u = await buildUnits({ graceMs: 0 });
    await u.acquire(PARTITION);
    // What the gateway held: v:1..v:3 on a, v:4 on b, and v:9 on a, gone since.
    await u.intake.batch(
      presenceBatch(PARTITION, "gw", [
        [a, "v:1", true],
        [a, "v:2", true],
        [a, "v:3", true],
        [a, "v:9", true],
        [b, "v:4", true],
      ]),
    );
    expect([value(a), value(b)]).toEqual([4, 1]);

    expect(await u.intake.syncPart(part(0, { pages: { [a]: ["v:1"] } }))).toEqual({ type: "ack" });
    expect([value(a), value(b)]).toEqual([4, 1]);
    expect(
      await u.intake.syncPart(
        part(1, { pages: { [a]: ["v:2", "v:3"], [b]: ["v:4"] }, sockets: { [b]: [3] } }),
      ),
    ).toEqual({ type: "ack" });
    expect([value(a), value(b), value(b, CONNECTIONS_COUNTER)]).toEqual([4, 1, 1]);
    expect(await u.intake.syncPart(part(2, { pages: { [b]: ["v:5"] }, passive: { [b]: ["v:5"] } }))).toEqual({
      type: "ack",
    });
    // The three parts as one sync: v:9 ends (no grace), v:5 arrives, v:4 holds three sockets.
    expect([value(a), value(b), value(b, CONNECTIONS_COUNTER)]).toEqual([3, 2, 4]);
    expect(value(b, "@active")).toBe(1);
  });

  test("counter - a part that does not follow the one before is refused, what was gathered goes, and the gateway's resync from the first part is applied", async () => {
    u = await buildUnits();
    await u.acquire(PARTITION);
    await u.intake.syncPart(part(0, { pages: { [a]: ["v:1"] } }));
    // Part 1 was lost: part 2 cannot complete the resync.
    const refused = await u.intake.syncPart(part(2, { pages: { [b]: ["v:5"] } }));
    expect(refused).toMatchObject({ type: "error", code: "unavailable" });
    expect(value(a)).toBe(0);
    // Nor can the missing part 1 now: the gathering was dropped.
    expect(await u.intake.syncPart(part(1, { pages: { [a]: ["v:2"] } }))).toMatchObject({ type: "error" });
    for (const [n, pages] of [
      [0, { [a]: ["v:1"] }],
      [1, { [a]: ["v:2"] }],
      [2, { [b]: ["v:5"] }],
    ] as const)
      expect(await u.intake.syncPart(part(n, { pages }))).toEqual({ type: "ack" });
    expect([value(a), value(b)]).toEqual([2, 1]);
  });

  test("counter - a whole sync drops a resync in parts begun before it; a gateway that goes down drops its own", async () => {
    u = await buildUnits();
    await u.acquire(PARTITION);
    await u.intake.syncPart(part(0, { pages: { [a]: ["v:1"] } }));
    await u.intake.sync({
      type: "presence_sync",
      gateway: "gw",
      partition: PARTITION,
      pages: { [b]: ["v:7"] },
    });
    expect(await u.intake.syncPart(part(1, { pages: { [a]: ["v:2"] } }))).toMatchObject({ type: "error" });
    expect([value(a), value(b)]).toEqual([0, 1]);

    await u.intake.syncPart(part(0, { pages: { [a]: ["v:1"] } }));
    expect(u.intake.resyncsInParts).toBe(1);
    u.intake.heartbeat({ type: "gateway", gateway: "gw", leaseMs: 10_000, state: "down" });
    expect(u.intake.resyncsInParts).toBe(0);
  });

  test("counter - a resync in parts whose next part has not come for a minute goes; one within it goes on", async () => {
    u = await buildUnits();
    await u.acquire(PARTITION);
    const beat = (): void =>
      void u.intake.heartbeat({ type: "gateway", gateway: "gw", leaseMs: 10 * STALE_MS, state: "up" });
    beat();
    await u.intake.syncPart(part(0, { pages: { [a]: ["v:1"] } }));
    await u.clock.advance(STALE_MS);
    beat();
    expect(await u.intake.syncPart(part(1, { pages: { [a]: ["v:2"] } }))).toEqual({ type: "ack" });
    await u.clock.advance(STALE_MS + 1);
    beat();
    // Given up by its gateway (say, the partition's owner changed): gone, and its last part refused.
    expect(await u.intake.syncPart(part(2, { pages: { [b]: ["v:5"] } }))).toMatchObject({ type: "error" });
    expect(u.intake.resyncsInParts).toBe(0);
    expect(value(a)).toBe(0);
  });
});
