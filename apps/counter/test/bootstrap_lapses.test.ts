/**
 * A lease that runs out here (the process stalled past it, or renewals went unanswered) and is then
 * renewed late stays this node's, and nobody is told: the bootstrap must not forget a partition it
 * was starting meanwhile (the node would never be ready), nor serve one it no longer holds, nor
 * serve without its fence.
 */
import { MemoryStore, StoreError, type Fence } from "@livecount/store";
import { describe, expect, test } from "vitest";
import { P, RETRY_MS, useBootstrap } from "./bootstrap_setup.js";

describe("counter - bootstrap across a lease that ran out here", () => {
  const setUp = useBootstrap();

  /** Alone with no peer to wait for, P taken: its bootstrap mark is being written (GatedStore). */
  async function markBeingWritten() {
    const set = await setUp({ store: (clock) => new GatedStore({ now: () => clock.now() }), discoveryMs: 0 });
    void set.b.partitionHeld(P);
    await set.clock.advance(0);
    return { ...set, gate: set.store as GatedStore };
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

  test("counter - a partition dropped while its mark was read, its fence still answering as the loss is handled, does not serve", async () => {
    const { clock, served, b } = await setUp({ alone: true });
    const held = b.partitionHeld(P);
    b.partitionDropped(P);
    await held;
    await clock.advance(RETRY_MS * 2);
    expect(served).toEqual([]);
    expect(b.isReady(P)).toBe(false);
  });

  test("counter - a lease that ran out as the last peer answered: marked under the lease held, it serves once its fence is back, asking nobody again", async () => {
    const { clock, fences, store, requests, served, servedWith, b } = await setUp({ peers: ["dc2"] });
    const fence = fences.get(P)!;
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(requests).toEqual([["dc2", [P]]]);
    fences.delete(P);
    b.peerSynced(P, "dc2", false);
    await clock.advance(RETRY_MS * 2);
    expect(await store.isBootstrapped(P)).toBe(true);
    expect(served).toEqual([]);
    fences.set(P, fence);
    requests.length = 0;
    await clock.advance(RETRY_MS);
    expect(requests).toEqual([]);
    expect(served).toEqual([P]);
    expect(servedWith).toEqual([fence]);
  });

  test("counter - a partition dropped while its mark is written does not serve; taken again, it serves with its new fence", async () => {
    const { clock, gate, fences, served, servedWith, b } = await markBeingWritten();
    const fence = fences.get(P)!;
    fences.delete(P);
    b.partitionDropped(P);
    gate.open();
    await clock.advance(0);
    expect(served).toEqual([]);
    expect(b.isReady(P)).toBe(false);
    fences.set(P, fence);
    await b.partitionHeld(P);
    await clock.advance(0);
    expect(served).toEqual([P]);
    expect(servedWith).toEqual([fence]);
  });

  test("counter - a partition dropped while its mark is written, the mark failing, is not synced again", async () => {
    const { clock, gate, fences, live, requests, b } = await markBeingWritten();
    fences.delete(P);
    b.partitionDropped(P);
    live.push("dc2");
    gate.fail();
    await clock.advance(0);
    await clock.advance(RETRY_MS * 5);
    expect(requests).toEqual([]);
    expect(b.progress).toEqual({ ready: 0, held: 0 });
  });

  test("counter - a lease that ran out while the mark was written: it serves with its fence once a late renewal brings it back", async () => {
    const { clock, gate, fences, served, servedWith } = await markBeingWritten();
    const fence = fences.get(P)!;
    fences.delete(P);
    gate.open();
    await clock.advance(RETRY_MS * 2);
    expect(served).toEqual([]);
    fences.set(P, fence);
    await clock.advance(RETRY_MS);
    expect(served).toEqual([P]);
    expect(servedWith).toEqual([fence]);
  });
});

/** A memory store whose first bootstrap mark waits until the test opens it or fails it. */
class GatedStore extends MemoryStore {
  #gate: { open: () => void; fail: (err: Error) => void } | undefined;
  #used = false;

  override async markBootstrapped(fence: Fence): Promise<boolean> {
    if (!this.#used) {
      this.#used = true;
      await new Promise<void>((open, fail) => (this.#gate = { open, fail }));
    }
    return super.markBootstrapped(fence);
  }

  open(): void {
    this.#gate!.open();
  }

  fail(): void {
    this.#gate!.fail(new StoreError("redis markBootstrapped failed: Command timed out"));
  }
}
