import { silentLogger } from "@livecount/runtime";
import { MemoryStore, type Fence } from "@livecount/store";
import { afterEach, describe, expect, test } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { Bootstrap } from "../src/bootstrap.js";

const RETRY_MS = 1_000;
const DISCOVERY_MS = 4_000;
const P = 7;

describe("counter - bootstrap", () => {
  let bootstrap: Bootstrap | undefined;
  afterEach(() => bootstrap?.stop());

  /** A Bootstrap over a memory store whose partition P is leased to this node. */
  async function setUp(opts: { peers?: string[]; expectedPeers?: string[]; alone?: boolean } = {}) {
    const clock = new ManualClock();
    const store = new MemoryStore({ now: () => clock.now() });
    const fences = new Map<number, Fence>();
    const lease = await store.acquire(P, "node-a", 3_600_000);
    if (lease === null) throw new Error("lease not taken");
    fences.set(P, lease);
    const live = [...(opts.peers ?? [])];
    const requests: Array<[string, number[]]> = [];
    const served: number[] = [];
    bootstrap = new Bootstrap({
      store,
      clock,
      logger: silentLogger,
      fenceOf: (p) => fences.get(p),
      liveRemotes: () => live,
      expectedPeers: opts.expectedPeers ?? [],
      alone: opts.alone ?? false,
      discoveryMs: DISCOVERY_MS,
      retryMs: RETRY_MS,
      requestSync: (remote, partitions) => requests.push([remote, [...partitions]]),
      serving: (p) => served.push(p),
    });
    bootstrap.start();
    return { clock, store, live, requests, served, b: bootstrap };
  }

  test("counter - alone (embedded), a partition never bootstrapped serves at once and is marked", async () => {
    const { clock, store, served, requests, b } = await setUp({ alone: true });
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(served).toEqual([P]);
    expect(requests).toEqual([]);
    expect(await store.isBootstrapped(P)).toBe(true);
  });

  test("counter - a partition already marked serves at once, asking nobody", async () => {
    const { clock, store, served, requests, b } = await setUp({ peers: ["dc2"] });
    await store.markBootstrapped((await store.acquire(P, "node-a", 3_600_000))!);
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(served).toEqual([P]);
    expect(requests).toEqual([]);
  });

  test("counter - a partition serves only once every live peer's transfer is merged, requests batched per peer", async () => {
    const { clock, store, served, requests, b } = await setUp({ peers: ["dc2", "dc3"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(requests).toEqual([
      ["dc2", [P]],
      ["dc3", [P]],
    ]);
    b.peerSynced(P, "dc2");
    await clock.advance(0);
    expect(served).toEqual([]);
    expect(b.isReady(P)).toBe(false);
    b.peerSynced(P, "dc3");
    await clock.advance(0);
    expect(served).toEqual([P]);
    expect(await store.isBootstrapped(P)).toBe(true);
    expect(b.progress).toEqual({ ready: 1, held: 1 });
  });

  test("counter - a peer's transfer merged before the partition started syncing counts: it is not asked again", async () => {
    const { clock, served, requests, b } = await setUp({ peers: ["dc2"] });
    b.peerSynced(P, "dc2");
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(requests).toEqual([]);
    expect(served).toEqual([P]);
  });

  test("counter - an unanswered request is sent again after the retry interval, to the peers still missing", async () => {
    const { clock, requests, b } = await setUp({ peers: ["dc2", "dc3"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    b.peerSynced(P, "dc2");
    requests.length = 0;
    await clock.advance(RETRY_MS * 2 + 1);
    expect(requests.length).toBeGreaterThan(0);
    expect(requests.every(([to]) => to === "dc3")).toBe(true);
  });

  test("counter - with a listed peer that is not live, a partition waits however long it takes, then syncs when the peer comes", async () => {
    const { clock, live, served, requests, b } = await setUp({ expectedPeers: ["dc2"] });
    await b.partitionHeld(P);
    await clock.advance(DISCOVERY_MS * 10);
    expect(served).toEqual([]);
    expect(requests).toEqual([]);
    expect(b.progress).toEqual({ ready: 0, held: 1 });
    live.push("dc2");
    b.remoteUp();
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
    b.peerSynced(P, "dc2");
    await clock.advance(0);
    expect(served).toEqual([P]);
  });

  test("counter - with no peer listed and none heard within discovery, the first DC of a deployment serves", async () => {
    const { clock, served, b } = await setUp();
    await b.partitionHeld(P);
    await clock.advance(DISCOVERY_MS - 1);
    expect(served).toEqual([]);
    await clock.advance(RETRY_MS + 1);
    expect(served).toEqual([P]);
  });

  test("counter - the only peer going down before its transfer sends the partition back to waiting", async () => {
    const { clock, live, served, requests, b } = await setUp({ peers: ["dc2"], expectedPeers: ["dc2"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    live.length = 0;
    b.remoteDown("dc2");
    requests.length = 0;
    await clock.advance(RETRY_MS * 3);
    expect(served).toEqual([]);
    expect(requests).toEqual([]);
    live.push("dc2");
    b.remoteUp();
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
  });

  test("counter - a peer going down after another's transfer was merged lets the partition serve", async () => {
    const { clock, live, served, b } = await setUp({ peers: ["dc2", "dc3"], expectedPeers: ["dc2", "dc3"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    b.peerSynced(P, "dc2");
    live.splice(live.indexOf("dc3"), 1);
    b.remoteDown("dc3");
    await clock.advance(0);
    expect(served).toEqual([P]);
  });

  test("counter - a dropped partition forgets its sync; held again, it asks again", async () => {
    const { clock, requests, served, b } = await setUp({ peers: ["dc2"] });
    b.peerSynced(P, "dc2");
    b.partitionDropped(P);
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
    expect(served).toEqual([]);
  });
});
