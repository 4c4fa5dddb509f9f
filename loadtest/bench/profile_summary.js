#!/usr/bin/env node
/**
 * Summarizes a V8 .cpuprofile (from `node --cpu-prof`): self time per function and per source file,
 * the largest first. Used to find what limits a benchmark:
 *
 *   LC_BENCH_NODE_FLAGS="--cpu-prof --cpu-prof-dir=/tmp/prof" node loadtest/bench/run.js counter
 *   node loadtest/bench/profile_summary.js /tmp/prof/CPU.*.cpuprofile [top=25] [fromMs-toMs]
 *
 * The optional window keeps only the samples taken that many milliseconds after the profile started
 * (the process's start): the storm's restarted gateway, say, from its spawn to exact (`0-3500`), not
 * its idle time after or its shutdown.
 *
 * Product processes are started with LC_BENCH_NODE_FLAGS; they write the profile when they exit
 * after SIGTERM, which the bench sends at the end of each benchmark.
 */
import { readFileSync } from "node:fs";

const [file, topArg, windowArg] = process.argv.slice(2);
if (file === undefined) {
  console.error("usage: node loadtest/bench/profile_summary.js <file.cpuprofile> [top] [fromMs-toMs]");
  process.exit(2);
}
const top = Number(topArg ?? 25);
const profile = JSON.parse(readFileSync(file, "utf8"));
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const selfUs = new Map();
const [fromMs, toMs] = (windowArg ?? "0-Infinity").split("-").map(Number);
// timeDeltas[i] is the time before sample i; attribute it to that sample's node.
let atUs = 0;
profile.samples.forEach((id, i) => {
  const deltaUs = profile.timeDeltas[i] ?? 0;
  atUs += deltaUs;
  if (atUs < fromMs * 1000 || atUs > toMs * 1000) return;
  selfUs.set(id, (selfUs.get(id) ?? 0) + deltaUs);
});
const total = [...selfUs.values()].reduce((a, b) => a + b, 0);

const shortUrl = (url) =>
  url
    .replace(/^file:\/\//, "")
    .replace(/.*\/node_modules\//, "node_modules/")
    .replace(/.*\/(apps|packages)\//, "$1/");
const byFunction = new Map();
const byFile = new Map();
for (const [id, us] of selfUs) {
  const { callFrame } = byId.get(id);
  const where = callFrame.url === "" ? "(native)" : shortUrl(callFrame.url);
  const fn = `${callFrame.functionName || "(anonymous)"} ${where}:${callFrame.lineNumber + 1}`;
  byFunction.set(fn, (byFunction.get(fn) ?? 0) + us);
  const fileKey = callFrame.url === "" ? callFrame.functionName || "(native)" : where;
  byFile.set(fileKey, (byFile.get(fileKey) ?? 0) + us);
}
// Inclusive time: a node's self time plus its subtree's, summed per function (a recursive function
// is counted once per distinct frame on the stack, so it may exceed 100%).
const inclusive = new Map();
const subtree = (node, onStack) => {
  let us = selfUs.get(node.id) ?? 0;
  const { callFrame } = node;
  const where = callFrame.url === "" ? "(native)" : shortUrl(callFrame.url);
  const fn = `${callFrame.functionName || "(anonymous)"} ${where}:${callFrame.lineNumber + 1}`;
  const first = !onStack.has(fn);
  if (first) onStack.add(fn);
  for (const child of node.children ?? []) us += subtree(byId.get(child), onStack);
  if (first) {
    onStack.delete(fn);
    inclusive.set(fn, (inclusive.get(fn) ?? 0) + us);
  }
  return us;
};
subtree(profile.nodes[0], new Set());

const print = (title, map) => {
  console.log(`\n${title} (of ${(total / 1e6).toFixed(2)} s sampled)`);
  for (const [name, us] of [...map].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(`${((100 * us) / total).toFixed(1).padStart(5)}%  ${name}`);
  }
};
print("self time by file", byFile);
print("self time by function", byFunction);
print("inclusive time by function", inclusive);
