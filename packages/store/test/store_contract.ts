/**
 * The behaviour every Store must show, run against each implementation. Time is a manual clock
 * handed to the store, so lease and key expiry are exact and tests never sleep. Here, leases and the
 * store-wide checks (bus notes, TTLs, after close); what
 * a store holds of pages (write, load, listPages) is in page_entries_contract.ts, run in the same
 * describe block.
 */
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import { InvalidStoreInputError, StoreError, type Lease, type Store } from "@livecount/store";
import { LEASE_MS, START_MS, leaseOf, type OpenStore } from "./contract_stores.js";
import { describePageEntries } from "./page_entries_contract.js";

export function describeStoreContract(name: string, open: OpenStore): void {
  describe(`${name} contract`, () => {
    let store: Store;
    let nowMs: number;
    const advance = (ms: number): void => {
      nowMs += ms;
    };

    beforeEach(async () => {
      nowMs = START_MS;
      store = await open(() => nowMs);
    });

    afterEach(async () => {
      await store.close();
    });

    const lease = (partition = 0, node = "node-a"): Promise<Lease> => leaseOf(store, partition, node);

    describe("leases", () => {
      test(`${name} - acquire takes a free partition at epoch 1 until now + ttl`, async () => {
        expect(await store.acquire(3, "node-a", LEASE_MS)).toEqual({
          partition: 3,
          node: "node-a",
          epoch: 1,
          expiresAt: START_MS + LEASE_MS,
        });
      });

      test(`${name} - the holder keeps its epoch when it re-acquires a live lease`, async () => {
        await lease(0, "node-a");
        advance(LEASE_MS - 1);
        expect(await store.acquire(0, "node-a", LEASE_MS)).toMatchObject({
          epoch: 1,
          expiresAt: START_MS + 2 * LEASE_MS - 1,
        });
      });

      test(`${name} - acquire refuses a partition another node holds`, async () => {
        await lease(0, "node-a");
        advance(LEASE_MS - 1);
        expect(await store.acquire(0, "node-b", LEASE_MS)).toBeNull();
      });

      test(`${name} - a lease expires exactly at expiresAt and a takeover bumps the epoch`, async () => {
        await lease(0, "node-a");
        advance(LEASE_MS);
        expect(await store.acquire(0, "node-b", LEASE_MS)).toMatchObject({ node: "node-b", epoch: 2 });
        expect(await store.acquire(0, "node-a", LEASE_MS)).toBeNull();
      });

      test(`${name} - re-acquiring one's own expired lease bumps the epoch`, async () => {
        await lease(0, "node-a");
        advance(LEASE_MS);
        expect(await store.acquire(0, "node-a", LEASE_MS)).toMatchObject({ epoch: 2 });
      });

      test(`${name} - release frees the partition and its epoch is never reused`, async () => {
        await store.release(await lease(0, "node-a"));
        const taken = await lease(0, "node-b");
        expect(taken).toMatchObject({ node: "node-b", epoch: 2 });
        await store.release(taken);
        expect(await store.acquire(0, "node-a", LEASE_MS)).toMatchObject({ epoch: 3 });
      });

      test(`${name} - release of a lost lease leaves the new holder alone`, async () => {
        const old = await lease(0, "node-a");
        advance(LEASE_MS);
        const current = await lease(0, "node-b");
        await store.release(old);
        expect(await store.acquire(0, "node-a", LEASE_MS)).toBeNull();
        expect(await store.renew([current], LEASE_MS)).toHaveLength(1);
      });

      test(`${name} - renew extends held leases and leaves out lost ones`, async () => {
        const lost = await lease(2, "node-a");
        const released = await lease(3, "node-a");
        await store.release(released);
        advance(LEASE_MS / 2);
        const held = await lease(1, "node-a");
        const other = await lease(4, "node-a");
        advance(LEASE_MS / 2);
        await lease(2, "node-b");

        const renewed = await store.renew(
          [held, lost, released, { ...other, node: "node-b" }, other],
          LEASE_MS,
        );
        expect(renewed).toEqual([
          { ...held, expiresAt: nowMs + LEASE_MS },
          { ...other, expiresAt: nowMs + LEASE_MS },
        ]);
        advance(LEASE_MS - 1);
        expect(await store.acquire(1, "node-b", LEASE_MS)).toBeNull();
      });

      test(`${name} - a lease that ran out is renewed with its epoch while nobody took it`, async () => {
        const l = await lease(0, "node-a");
        advance(LEASE_MS);
        const writes = [{ page: "p1", counter: "likes", dc: "dc1", entry: { p: 1, n: 0 } }];
        // Ran out and nobody took it: its fence still writes (only a takeover's epoch stales it),
        // its renewal keeps its epoch, and meanwhile another node could have taken it.
        expect(await store.write([{ fence: l, writes }])).toEqual([]);
        expect(await store.renew([l], LEASE_MS)).toEqual([{ ...l, expiresAt: nowMs + LEASE_MS }]);
        expect(await store.write([{ fence: l, writes }])).toEqual([]);
        expect(await store.acquire(0, "node-b", LEASE_MS)).toBeNull();
      });

      test(`${name} - a lease that ran out and was taken is not renewed by its former holder`, async () => {
        const l = await lease(0, "node-a");
        advance(LEASE_MS);
        const taken = await lease(0, "node-b");
        expect(await store.renew([l], LEASE_MS)).toEqual([]);
        expect(await store.renew([taken], LEASE_MS)).toHaveLength(1);
        // Taken and released: the former holder still cannot have it back by renewing.
        await store.release(taken);
        expect(await store.renew([l], LEASE_MS)).toEqual([]);
        expect(await store.acquire(0, "node-a", LEASE_MS)).toMatchObject({ epoch: 3 });
      });

      test(`${name} - epochs are counted per partition`, async () => {
        await lease(0, "node-a");
        advance(LEASE_MS);
        await lease(0, "node-a");
        expect(await store.acquire(1, "node-a", LEASE_MS)).toMatchObject({ epoch: 1 });
      });

      test(`${name} - renew of nothing is nothing`, async () => {
        expect(await store.renew([], LEASE_MS)).toEqual([]);
      });

      test(`${name} - bus notes: by the store's clock, a stretch kept while it goes on and begun anew after a break, node ids kept as given`, async () => {
        expect((await store.busHeard()).notes).toEqual(new Map());
        await store.noteBusHeard("counter-1", false);
        const first = (await store.busHeard()).notes.get("counter-1")!;
        expect(first.since).toBe(first.at);
        advance(5);
        await new Promise((resolve) => setTimeout(resolve, 5));
        await store.noteBusHeard("counter-1", true);
        await store.noteBusHeard("counter:{2}", true);
        const { now, notes } = await store.busHeard();
        const going = notes.get("counter-1")!;
        expect(going.since).toBe(first.since);
        expect(going.at).toBeGreaterThan(first.at);
        // Continuing with no earlier note begins a stretch.
        expect(notes.get("counter:{2}")!.since).toBe(notes.get("counter:{2}")!.at);
        expect(now).toBeGreaterThanOrEqual(going.at);
        advance(5);
        await new Promise((resolve) => setTimeout(resolve, 5));
        await store.noteBusHeard("counter-1", false);
        const anew = (await store.busHeard()).notes.get("counter-1")!;
        expect(anew.since).toBe(anew.at);
        expect(anew.since).toBeGreaterThan(going.at);
      });

      test(`${name} - rejects a ttl that is not a positive integer`, async () => {
        await expect(store.acquire(0, "node-a", 0)).rejects.toBeInstanceOf(InvalidStoreInputError);
        await expect(store.renew([], 1.5)).rejects.toBeInstanceOf(InvalidStoreInputError);
      });
    });

    describePageEntries(name, {
      get store() {
        return store;
      },
      advance,
      lease,
    });

    test(`${name} - calls after close reject with a StoreError`, async () => {
      await store.close();
      await expect(store.load("p1")).rejects.toBeInstanceOf(StoreError);
      await expect(store.acquire(0, "node-a", LEASE_MS)).rejects.toBeInstanceOf(StoreError);
    });
  });
}
