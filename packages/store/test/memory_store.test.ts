import { describe, expect, test } from "vitest";
import { MemoryStore } from "@livecount/store";
import { describeConvergenceContract } from "./convergence_contract.js";
import { describeFenceContract } from "./fence_contract.js";
import { describePurgeContract } from "./purge_contract.js";
import { describeIncrementBatchContract } from "./increment_batch_contract.js";
import { describeIncrementContract } from "./increment_contract.js";
import { describeWindowContract } from "./window_contract.js";
import { describeStoreContract } from "./store_contract.js";

describeStoreContract("memory store", async (now) => new MemoryStore({ now }));
describeConvergenceContract("memory store", async (now) => new MemoryStore({ now }));
describeFenceContract("memory store", async (now) => new MemoryStore({ now }));
describePurgeContract("memory store", async (now) => new MemoryStore({ now }));
describeWindowContract("memory store", async (now) => new MemoryStore({ now }));
describeIncrementBatchContract("memory store", async (now) => new MemoryStore({ now }));
describeIncrementContract("memory store", async (now) => new MemoryStore({ now }));

describe("memory store", () => {
  test("memory store - a bus note an hour old is dropped when the notes are read; one just younger is kept", async () => {
    let nowMs = 1_000_000;
    const store = new MemoryStore({ now: () => nowMs });
    await store.noteBusHeard("gone", false);
    nowMs += 1;
    await store.noteBusHeard("kept", false);
    nowMs += 3_600_000;
    expect([...(await store.busHeard()).notes.keys()]).toEqual(["kept"]);
    nowMs += 1;
    expect([...(await store.busHeard()).notes.keys()]).toEqual([]);
  });

  test("memory store - reclaims expired idempotency keys as new ones arrive", async () => {
    let nowMs = 0;
    const store = new MemoryStore({ now: () => nowMs });
    const fence = await store.acquire(0, "node-a", Number.MAX_SAFE_INTEGER);
    const keyTtlMs = 1_000;
    const burst = (from: number, count: number) =>
      Array.from({ length: count }, (_, i) => ({
        fence: fence!,
        page: "p1",
        counter: "likes",
        dc: "dc1",
        delta: 1,
        key: `k${from + i}`,
        payload: "",
      }));

    for (let round = 0; round < 20; round++) {
      await store.increment(burst(round * 1_000, 1_000), keyTtlMs);
      nowMs += keyTtlMs;
    }
    // Live keys never exceed one burst, so memory stays within a small multiple of it.
    expect(store.rememberedKeys).toBeLessThanOrEqual(3 * 1_000);
    expect((await store.load("p1")).likes?.dc1).toEqual({ p: 20_000, n: 0 });
  });

  test("memory store - sweeps expired keys once the sweep interval passed", async () => {
    let nowMs = 0;
    const store = new MemoryStore({ now: () => nowMs });
    const fence = await store.acquire(0, "node-a", Number.MAX_SAFE_INTEGER);
    const op = (key: string) => ({
      fence: fence!,
      page: "p1",
      counter: "c",
      dc: "dc1",
      delta: 1,
      key,
      payload: "",
    });
    await store.increment([op("a"), op("b")], 1_000);
    nowMs += 60_000;
    await store.increment([op("c")], 1_000);
    expect(store.rememberedKeys).toBe(1);
  });
});
