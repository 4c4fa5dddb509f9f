/**
 * What the store contracts (*_contract.ts) share: how a contract opens the store it runs against,
 * the time its manual clock starts at, and the leases, increments and pages its tests take.
 */
import { partitionOf } from "@livecount/ring";
import type { Fence, IncrementOp, Lease, Store } from "@livecount/store";

/** Opens a fresh, empty store reading time from `now`. */
export type OpenStore = (now: () => number) => Promise<Store>;

export const START_MS = 1_700_000_000_000;
export const LEASE_MS = 10_000;
export const KEY_TTL_MS = 60_000;
export const PARTITIONS = 16;

/** A lease of `partition` for `node` (LEASE_MS); fails the test when another node holds it. */
export async function leaseOf(store: Store, partition: number, node: string): Promise<Lease> {
  const l = await store.acquire(partition, node, LEASE_MS);
  if (l === null) throw new Error(`partition ${partition} is held by another node`);
  return l;
}

/** An increment of p1's likes in dc1 by 1 under key k1, with `overrides`. */
export function incrementOp(fence: Fence, overrides: Partial<IncrementOp> = {}): IncrementOp {
  return {
    fence,
    page: "p1",
    counter: "likes",
    dc: "dc1",
    delta: 1,
    key: "k1",
    payload: "first",
    ...overrides,
  };
}

/** A page id of `partition` (of PARTITIONS), distinct for each `n`. */
export function pageIn(partition: number, n: number): string {
  for (let i = 0, found = 0; ; i++) {
    const page = `conv-${i}`;
    if (partitionOf(page, PARTITIONS) === partition && found++ === n) return page;
  }
}
