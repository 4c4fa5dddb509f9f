/**
 * A lease that runs out here (the process stalled past it, or renewals went unanswered) and is then
 * renewed late stays this node's, and nobody is told: the bootstrap must neither forget a partition
 * it was starting meanwhile (the node would never be ready) nor mark one whose transfer lost
 * entries while nothing could be merged (this DC would count its own entries from below).
 */
import { afterEach, describe, expect, test } from "vitest";
import type { Bootstrap } from "../src/bootstrap.js";
import { P, RETRY_MS, setUpBootstrap, type BootstrapSetup } from "./bootstrap_setup.js";

describe("counter - bootstrap across a lease that ran out here", () => {
  let bootstrap: Bootstrap | undefined;
  afterEach(() => bootstrap?.stop());

  async function setUp(opts: BootstrapSetup = {}) {
    const set = await setUpBootstrap(opts);
    bootstrap = set.b;
    return set;
  }

  test("counter - a lease that ran out while the mark was read: the partition serves once a late renewal brings its fence back", async () => {
    const { clock, fences, served, b } = await setUp({ alone: true });
    const fence = fences.get(P)!;
    const held = b.partitionHeld(P);
    fences.delete(P);
    await held;
    await clock.advance(RETRY_MS * 3);
    expect(served).toEqual([]);
    expect(b.progress).toEqual({ ready: 0, held: 1 });
    fences.set(P, fence);
    await clock.advance(RETRY_MS);
    expect(served).toEqual([P]);
    expect(b.progress).toEqual({ ready: 1, held: 1 });
  });

  test("counter - a lease already run out when it was taken: nothing is read until its fence is back", async () => {
    const { clock, fences, store, served, b } = await setUp({ alone: true });
    const fence = fences.get(P)!;
    fences.delete(P);
    await b.partitionHeld(P);
    await clock.advance(RETRY_MS * 2);
    expect(served).toEqual([]);
    expect(await store.isBootstrapped(P)).toBe(false);
    fences.set(P, fence);
    await clock.advance(RETRY_MS);
    expect(served).toEqual([P]);
  });

  test("counter - a partition lost while its mark was read is forgotten, not checked again", async () => {
    const { clock, fences, served, b } = await setUp({ alone: true });
    const held = b.partitionHeld(P);
    fences.delete(P);
    b.partitionDropped(P);
    await held;
    await clock.advance(RETRY_MS * 3);
    expect(served).toEqual([]);
    expect(b.progress).toEqual({ ready: 0, held: 0 });
  });

  test("counter - a lease that ran out as the last peer answered: the partition learns again, then serves", async () => {
    const { clock, fences, requests, served, b } = await setUp({ peers: ["dc2"] });
    const fence = fences.get(P)!;
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
    fences.delete(P);
    b.peerSynced(P, "dc2", false);
    await clock.advance(RETRY_MS * 2);
    expect(served).toEqual([]);
    fences.set(P, fence);
    requests.length = 0;
    await clock.advance(RETRY_MS);
    expect(requests).toEqual([["dc2", [P]]]);
    expect(served).toEqual([]);
    b.peerSynced(P, "dc2", false);
    await clock.advance(0);
    expect(served).toEqual([P]);
  });

  test("counter - a transfer that lost entries here teaches nothing: its peer is asked again, and the next one serves", async () => {
    const { clock, requests, served, b } = await setUp({ peers: ["dc2"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    requests.length = 0;
    b.dropped(P, "dc2");
    b.peerSynced(P, "dc2", false);
    await clock.advance(0);
    expect(served).toEqual([]);
    expect(requests).toEqual([["dc2", [P]]]);
    b.peerSynced(P, "dc2", false);
    await clock.advance(0);
    expect(served).toEqual([P]);
  });

  test("counter - a peer that taught the partition, then lost an update here before it was marked, is asked again", async () => {
    const { clock, requests, served, b } = await setUp({ peers: ["dc2", "dc3"] });
    await b.partitionHeld(P);
    await clock.advance(0);
    b.peerSynced(P, "dc2", false);
    requests.length = 0;
    b.dropped(P, "dc2");
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
    b.peerSynced(P, "dc3", false);
    await clock.advance(0);
    expect(served).toEqual([]);
    b.peerSynced(P, "dc2", false);
    await clock.advance(0);
    expect(served).toEqual([P]);
  });

  test("counter - a transfer merged before the partition started syncing, then a lost update: that peer is asked", async () => {
    const { clock, requests, served, b } = await setUp({ peers: ["dc2"] });
    b.peerSynced(P, "dc2", false);
    b.dropped(P, "dc2");
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
    expect(served).toEqual([]);
    b.peerSynced(P, "dc2", false);
    await clock.advance(0);
    expect(served).toEqual([P]);
  });
});
