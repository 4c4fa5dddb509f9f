/**
 * The counter node's per-viewer work alone: `PagePresence` of the built counter
 * (`apps/counter/dist`), replaying the counter benchmark's pattern (viewers with new ids joining and
 * leaving pages, about ten per page, graces ending as time moves) and printing the CPU it took. Not
 * part of `run.js`: a tool to compare two revisions of the file, run alternately on one machine.
 *
 *   node loadtest/bench/presence_replay.js [root=.] [ops=3000000] [pages=2000]
 *
 * `root` is a checkout whose `npm run build` has run: another worktree measures another revision.
 * The same seed gives the same ops, and the viewers counting at the end are printed, so two
 * revisions can be checked to agree.
 */
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { prng } from "./lib/prng.js";

const root = resolve(process.argv[2] ?? ".");
const OPS = Number(process.argv[3] ?? 3_000_000);
const PAGES = Number(process.argv[4] ?? 2000);
/** The counter's default LIVECOUNT_GRACE_MS. */
const GRACE_MS = 3000;
/** Below this many viewers on a page, joins are likelier than leaves (presence_load.js's targetViewers). */
const TARGET_VIEWERS = 10;
/** Simulated time moves 1 ms every this many ops, and graces are swept every ten steps. */
const OPS_PER_MS = 100;

const { PagePresence } = await import(
  pathToFileURL(resolve(root, "apps/counter/dist/page_presence.js")).href
);
const rand = prng(42);
const pages = Array.from({ length: PAGES }, () => new PagePresence(() => {}));
const held = Array.from({ length: PAGES }, () => []);
let now = 1_000_000;
let seq = 0;

const started = process.cpuUsage();
for (let i = 0; i < OPS; i++) {
  if (i % OPS_PER_MS === 0) {
    now++;
    if (i % (10 * OPS_PER_MS) === 0) for (const p of pages) p.expire(now);
  }
  const k = Math.floor(rand() * PAGES);
  const viewers = held[k];
  const join = viewers.length === 0 || rand() < (viewers.length < TARGET_VIEWERS ? 0.6 : 0.4);
  if (join) {
    const viewer = `v:g0.${seq++}`;
    viewers.push(viewer);
    pages[k].hold("gw", viewer, 1, true);
  } else {
    const j = Math.floor(rand() * viewers.length);
    const viewer = viewers[j];
    viewers[j] = viewers[viewers.length - 1];
    viewers.pop();
    pages[k].release("gw", viewer, now, GRACE_MS);
  }
}
const cpu = process.cpuUsage(started);
const counting = pages.reduce((n, p) => n + p.count, 0);
console.log(
  `${root}: ${OPS} ops over ${PAGES} pages in ${Math.round((cpu.user + cpu.system) / 1000)} ms of CPU; ${counting} viewers counting at the end`,
);
