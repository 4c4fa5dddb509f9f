#!/usr/bin/env node
/**
 * Where a function's time comes from in a V8 .cpuprofile: the inclusive time of every frame of
 * `function` (its own samples and everything it called), summed per chain of its callers, the
 * largest first. profile_summary.js says how much a function costs; this says which call site pays:
 *
 *   node loadtest/bench/profile_callers.js <file.cpuprofile> <function> [depth=8] [top=8]
 *
 * A chain prints as `caller:line < its caller:line < ...`. A function that calls itself counts once
 * per frame on the stack, so its chains may sum to more than its inclusive time.
 */
import { readFileSync } from "node:fs";

const [file, fn, depthArg = "8", topArg = "8"] = process.argv.slice(2);
if (file === undefined || fn === undefined) {
  console.error("usage: node loadtest/bench/profile_callers.js <file.cpuprofile> <function> [depth] [top]");
  process.exit(2);
}
const profile = JSON.parse(readFileSync(file, "utf8"));
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parentOf = new Map();
for (const n of profile.nodes) for (const child of n.children ?? []) parentOf.set(child, n.id);
const selfUs = new Map();
profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
const inclusiveUs = (id) =>
  (selfUs.get(id) ?? 0) + (byId.get(id).children ?? []).reduce((sum, child) => sum + inclusiveUs(child), 0);

const chains = new Map();
for (const node of profile.nodes) {
  if (node.callFrame.functionName !== fn) continue;
  const callers = [];
  for (
    let id = parentOf.get(node.id);
    id !== undefined && callers.length < Number(depthArg);
    id = parentOf.get(id)
  ) {
    const { functionName, lineNumber } = byId.get(id).callFrame;
    callers.push(`${functionName || "(anonymous)"}:${lineNumber + 1}`);
  }
  const chain = callers.join(" < ");
  chains.set(chain, (chains.get(chain) ?? 0) + inclusiveUs(node.id));
}
for (const [chain, us] of [...chains].sort((a, b) => b[1] - a[1]).slice(0, Number(topArg)))
  console.log(`${(us / 1000).toFixed(1).padStart(9)} ms  ${chain}`);
