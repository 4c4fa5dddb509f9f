/**
 * A fence is its holder's: the partition's current epoch carried by another node is stale for every
 * fenced operation. A store that lost its last writes (a Redis restarted from an `everysec` append
 * file) hands an epoch out again, and only the holder tells the two owners apart.
 */
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import { windowCounterOf } from "@livecount/protocol";
import { StaleFenceError, type Fence, type Lease, type Store } from "@livecount/store";
import { LEASE_MS, incrementOp, leaseOf, type OpenStore } from "./contract_stores.js";

const START_MS = 1_700_000_000_000;
const KEY_TTL_MS = 60_000;
const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

export function describeFenceContract(name: string, open: OpenStore): void {
  describe(`${name} fence contract`, () => {
    let store: Store;
    let nowMs: number;
    let current: Lease;
    /** The current epoch, carried by a node that does not hold the lease. */
    let impostor: Fence;

    beforeEach(async () => {
      nowMs = START_MS;
      store = await open(() => nowMs);
      current = await leaseOf(store, 0, "node-b/2");
      impostor = { partition: 0, node: "node-a/1", epoch: current.epoch };
    });

    afterEach(async () => {
      await store.close();
    });

    const presence = (page: string) => ({ page, counter: "@viewers", dc: "dc1", entry: { p: 1, n: 0 } });

    test(`${name} - write refuses the current epoch under another holder`, async () => {
      expect(await store.write([{ fence: impostor, writes: [presence("p1")] }])).toEqual([impostor]);
      expect(await store.load("p1")).toEqual({});
      expect(await store.write([{ fence: current, writes: [presence("p1")] }])).toEqual([]);
      expect(await store.load("p1")).toEqual({ "@viewers": { dc1: { p: 1, n: 0 } } });
    });

    test(`${name} - increment, mergePages and markBootstrapped refuse it and record nothing`, async () => {
      expect(await store.increment([incrementOp(impostor)], KEY_TTL_MS)).toEqual([{ kind: "stale" }]);
      const record = new Map([["p2", { likes: { dc2: { p: 4, n: 0 } } }]]);
      expect(await store.mergePages(impostor, record, "dc1")).toBeNull();
      expect(await store.markBootstrapped(impostor)).toBe(false);
      expect(await store.load("p1")).toEqual({});
      expect(await store.load("p2")).toEqual({});
      expect(await store.isBootstrapped(0)).toBe(false);
      // The key was not recorded: the holder's increment under it applies.
      expect(await store.increment([incrementOp(current)], KEY_TTL_MS)).toMatchObject([{ kind: "applied" }]);
    });

    test(`${name} - the sweeps and purges refuse it, and raisePurgeFloor raises nothing`, async () => {
      await store.write([{ fence: current, writes: [{ ...presence("p1"), entry: { p: 1, n: 1 } }] }]);
      // A like in a minute's bucket, due for removal a day after its minute.
      const minute = Math.floor(nowMs / MINUTE_MS);
      const bucket = { counter: windowCounterOf("likes", minute), delta: 1 };
      await store.increment([incrementOp(current, { page: "p2", also: [bucket] })], KEY_TTL_MS);
      nowMs = (minute + 1) * MINUTE_MS + DAY_MS;
      await expect(store.removeEmptyPages(impostor, nowMs, 10)).rejects.toBeInstanceOf(StaleFenceError);
      await expect(store.removeExpiredBuckets(impostor, 10)).rejects.toBeInstanceOf(StaleFenceError);
      await expect(store.purgeTombstones(impostor, nowMs, 0, 10)).rejects.toBeInstanceOf(StaleFenceError);
      expect(await store.raisePurgeFloor(impostor, 90)).toBe(false);
      expect(await store.purgeFloor(0)).toBe(0);
      // Nobody took the lease since: its holder's fence still sweeps.
      expect(await store.removeEmptyPages(current, nowMs, 10)).toEqual(["p1"]);
      expect(await store.removeExpiredBuckets(current, 10)).toBe(1);
    });

    test(`${name} - a renewal by the other holder keeps nothing of the lease`, async () => {
      expect(await store.renew([{ ...impostor, expiresAt: current.expiresAt }], LEASE_MS)).toEqual([]);
      expect(await store.renew([current], LEASE_MS)).toHaveLength(1);
    });
  });
}
