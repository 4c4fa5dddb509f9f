#!/usr/bin/env node
/**
 * What the owner's memory of answered idempotency keys (apps/counter/src/recent_keys.ts) holds per
 * key at LIVECOUNT_IDEMPOTENCY_MEMORY_KEYS' default: the key's entry, and the decoded request and
 * the answer it keeps to compare a retry with and to write back. Heap bytes after collections,
 * keys as the hot page's requests carry them. Not part of `run.js`: it sizes a setting.
 *
 *   npm run build && node --expose-gc loadtest/bench/key_memory.js [keys=100000]
 */
import { RecentKeys, incrementChange } from "../../apps/counter/dist/recent_keys.js";

const KEYS = Number(process.argv[2] ?? 100_000);
const BATCH = 500;
if (typeof globalThis.gc !== "function") throw new Error("run with node --expose-gc");

const clock = {
  now: () => 0,
  monotonic: () => 0,
  setTimeout: () => 0,
  clearTimeout: () => {},
  defer: (f) => f(),
};
const keys = new RecentKeys({
  clock,
  logger: { warn() {}, info() {} },
  store: {},
  fenceOf: () => undefined,
  keyTtlMs: 86_400_000,
  memoryMs: 60_000,
  maxKeys: KEYS,
});
const use = (request, reply) => ({ change: incrementChange(request), record: { key: request.key, reply } });
const actor = { partition: 3 };
globalThis.gc();
globalThis.gc();
const before = process.memoryUsage().heapUsed;
for (let i = 0; i < KEYS; i += BATCH) {
  const answers = [];
  for (let j = i; j < Math.min(i + BATCH, KEYS); j++) {
    const key = `k-${j.toString(36).padStart(12, "0")}`;
    const request = { type: "increment", page: "hot-page", counter: "likes", delta: 1, key };
    const reply = {
      type: "incremented",
      page: "hot-page",
      counter: "likes",
      value: j,
      updatedAt: 1e12 + j,
      duplicate: false,
    };
    answers.push({ pending: { actor, request, resolve() {} }, reply });
  }
  await keys.settled(answers, 0, use);
}
globalThis.gc();
globalThis.gc();
const after = process.memoryUsage().heapUsed;
// Read after the measure, so the memory is alive while it is taken.
console.log(`${keys.size} keys kept: ${Math.round((after - before) / keys.size)} bytes of heap each`);
