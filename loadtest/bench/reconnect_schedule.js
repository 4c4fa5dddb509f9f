/**
 * When a crowd of tabs would first reach a restarted gateway by the reconnect rule alone: each tab
 * retries after reconnectDelayMs (the widget's and SDK's rule, docs/protocol.md "Reconnecting"),
 * every try before the gateway listens fails at once, and the first try after it succeeds. No
 * sockets and no CPU besides this loop: what the storm benchmark's return would take on a machine
 * with cores to spare, to hold against what it measures.
 *
 *   node loadtest/bench/reconnect_schedule.js [tabs=18000] [listeningMs=150,300,500,700,900] [seed=1]
 *
 * Prints, per time to listening, the first successful try's time after the drop (p50, p90, p99, max).
 */
import { reconnectDelayMs } from "@livecount/sdk";
import { prng } from "./lib/prng.js";

/** The widget's BACKOFF_BASE_MS and BACKOFF_CAP_MS (packages/widget/src/connections.ts). */
const BASE_MS = 500;
const MAX_MS = 30_000;

const [tabsArg = "18000", listeningArg = "150,300,500,700,900", seedArg = "1"] = process.argv.slice(2);
const tabs = Number(tabsArg);
const random = prng(Number(seedArg));

for (const listeningMs of listeningArg.split(",").map(Number)) {
  const back = [];
  for (let t = 0; t < tabs; t++) {
    let at = 0;
    for (let failures = 0; ; failures++) {
      // `down` is how long the connection has been down: since the drop, at time 0.
      at += reconnectDelayMs(failures, at, BASE_MS, MAX_MS, random);
      if (at >= listeningMs) break;
    }
    back.push(at);
  }
  back.sort((a, b) => a - b);
  const q = (p) => back[Math.min(back.length - 1, Math.floor(p * back.length))];
  console.log(
    `listening at ${listeningMs} ms: first successful try p50 ${q(0.5)} / p90 ${q(0.9)} / p99 ${q(0.99)} / max ${q(1)} ms`,
  );
}
