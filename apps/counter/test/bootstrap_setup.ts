import { silentLogger, type Logger } from "@livecount/runtime";
import { MemoryStore, type Fence } from "@livecount/store";
import { afterEach } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { Bootstrap } from "../src/bootstrap.js";

export const RETRY_MS = 1_000;
export const DISCOVERY_MS = 4_000;
/** The partition leased to the node under test. */
export const P = 7;

export interface BootstrapSetup {
  dc?: string;
  peers?: string[];
  heard?: string[];
  expectedPeers?: string[];
  alone?: boolean;
  logger?: Logger;
  discoveryMs?: number;
  /** The node's store (default: a MemoryStore on the test's clock). */
  store?: (clock: ManualClock) => MemoryStore;
}

/** Sets up a Bootstrap per test (setUpBootstrap) and stops it after the test. Call inside `describe`. */
export function useBootstrap(): (opts?: BootstrapSetup) => ReturnType<typeof setUpBootstrap> {
  let bootstrap: Bootstrap | undefined;
  afterEach(() => bootstrap?.stop());
  return async (opts = {}) => {
    const set = await setUpBootstrap(opts);
    bootstrap = set.b;
    return set;
  };
}

/**
 * A started Bootstrap over a memory store whose partition P is leased to this node. `fences` is what
 * the node serves: delete P's to make its lease run out here, set it back for a late renewal.
 */
export async function setUpBootstrap(opts: BootstrapSetup = {}) {
  const clock = new ManualClock();
  const store = opts.store?.(clock) ?? new MemoryStore({ now: () => clock.now() });
  const fences = new Map<number, Fence>();
  /** The leases held: they stay while a fence is deleted (run out here), as in the ownership. */
  const leases = new Map<number, Fence>();
  const lease = await store.acquire(P, "node-a", 3_600_000);
  if (lease === null) throw new Error("lease not taken");
  fences.set(P, lease);
  leases.set(P, lease);
  const live = [...(opts.peers ?? [])];
  // DCs heard since start besides those live now (down since).
  const heard = [...(opts.heard ?? [])];
  const requests: Array<[string, number[]]> = [];
  const served: number[] = [];
  /** The fence each partition had when it started serving (undefined: it served without one). */
  const servedWith: Array<Fence | undefined> = [];
  const b = new Bootstrap({
    dc: opts.dc ?? "dc1",
    store,
    clock,
    logger: opts.logger ?? silentLogger,
    fenceOf: (p) => fences.get(p),
    leaseOf: (p) => leases.get(p),
    liveRemotes: () => live,
    heardRemotes: () => [...new Set([...live, ...heard])],
    expectedPeers: opts.expectedPeers ?? [],
    alone: opts.alone ?? false,
    discoveryMs: opts.discoveryMs ?? DISCOVERY_MS,
    retryMs: RETRY_MS,
    requestSync: (remote, partitions) => requests.push([remote, [...partitions]]),
    serving: (p) => {
      served.push(p);
      servedWith.push(fences.get(p));
    },
  });
  b.start();
  return { clock, store, fences, leases, live, heard, requests, served, servedWith, b };
}
