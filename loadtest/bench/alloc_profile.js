#!/usr/bin/env node
/**
 * What a running Node process allocates, by allocating function and its two callers: V8's sampling
 * heap profiler over the inspector, with the objects minor and major GCs collected kept, so the
 * bytes are what the garbage collector had to deal with, not what survived. Used to find what makes
 * a benchmark's GC work:
 *
 *   LC_BENCH_NODE_FLAGS="--inspect=127.0.0.1:9339" node loadtest/bench/run.js counter &
 *   node loadtest/bench/alloc_profile.js 9339 [waitS=6] [sampleS=10] [top=30]
 *
 * It waits for the inspector, then `waitS` more (the load under way), samples for `sampleS` and
 * prints the total and the largest sites as shares of it. LC_BENCH_NODE_FLAGS reaches every product
 * process the benchmark starts: pick one that starts a single product process with an inspector
 * (the counter benchmark's node), or give each its own port another way.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { inspectorSession } from "./lib/measure.js";

const [port, waitS = "6", sampleS = "10", top = "30"] = process.argv.slice(2);
if (port === undefined) {
  console.error("usage: node loadtest/bench/alloc_profile.js <inspectPort> [waitS] [sampleS] [top]");
  process.exit(2);
}
for (;;) {
  try {
    await globalThis.fetch(`http://127.0.0.1:${port}/json/list`);
    break;
  } catch {
    await sleep(200);
  }
}
await sleep(Number(waitS) * 1000);
const session = await inspectorSession(Number(port));
await session.call("HeapProfiler.startSampling", {
  samplingInterval: 16_384,
  includeObjectsCollectedByMajorGC: true,
  includeObjectsCollectedByMinorGC: true,
});
await sleep(Number(sampleS) * 1000);
const { profile } = await session.call("HeapProfiler.stopSampling");
session.close();

const nameOf = ({ functionName, url, lineNumber }) =>
  `${functionName || "(anonymous)"} ${url.replace(/.*\/(apps|packages|node_modules)\//, "$1/")}:${lineNumber}`;
const bytes = new Map();
let total = 0;
const walk = (node, callers) => {
  const key = `${nameOf(node.callFrame)}  <  ${callers.slice(-2).reverse().join(" < ")}`;
  total += node.selfSize;
  bytes.set(key, (bytes.get(key) ?? 0) + node.selfSize);
  for (const child of node.children) walk(child, [...callers, node.callFrame.functionName || "(anonymous)"]);
};
walk(profile.head, []);
console.log(`allocated in ${sampleS} s (sampled): ${(total / 2 ** 20).toFixed(1)} MB`);
for (const [key, n] of [...bytes].sort((a, b) => b[1] - a[1]).slice(0, Number(top)))
  console.log(`${((100 * n) / total).toFixed(1).padStart(5)}%  ${key}`);
