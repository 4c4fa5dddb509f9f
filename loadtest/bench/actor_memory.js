/**
 * What one page actor costs a counter node's V8 heap while it is resident: N actors of the built
 * counter (`apps/counter/dist`), each loaded with a page of likes from two DCs, flushed (its writes
 * taken, written and published) and kept; the heap measured after full collections before and
 * after. Three kinds of page: likes only; likes and one viewer held by a gateway; likes and a viewer
 * that came and left (idle again, as the actors `LIVECOUNT_MAX_ACTORS` caps). The page ids are
 * counted in. Then the same for one PN-counter with 0, 1 and 2 replicas, and for an empty Map, the
 * unit most per-page state used to be made of. Not part of `run.js`: a tool for the actors' memory,
 * deterministic where RSS is not.
 *
 *   node --expose-gc loadtest/bench/actor_memory.js [actors=50000] [root=.]
 *
 * `root` is a checkout whose `npm run build` has run: another worktree measures another revision.
 */
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import v8 from "node:v8";

const N = Number(process.argv[2] ?? 50_000);
const root = resolve(process.argv[3] ?? ".");
if (typeof globalThis.gc !== "function") {
  console.error("usage: node --expose-gc loadtest/bench/actor_memory.js [actors] [root]");
  process.exit(2);
}
const load = (path) => import(pathToFileURL(resolve(root, path)).href);
const { PageActor } = await load("apps/counter/dist/page_actor.js");
const { VisitorHash } = await load("apps/counter/dist/visitor_hash.js");
const { PNCounter } = await load("packages/crdt/dist/index.js");
const { HOLD_DROPPED, holdCode } = await load("packages/protocol/dist/index.js");
/** One active socket (protocol presence_pages.ts). */
const HOLD_ACTIVE_SOCKET = holdCode(1, true);

/** An actor's node reduced to what the actor asks of it (apps/counter/src/actor_host.ts). */
const host = {
  dc: "dc1",
  graceMs: 3000,
  visitorHash: new VisitorHash("actor-memory-visitor-key"),
  now: () => 1_000_000,
  markDirty() {},
  wakeAt() {},
  presenceFloor: () => 0,
  presenceRaised() {},
  purgeFloor: () => 0,
};

function heapUsed() {
  globalThis.gc();
  globalThis.gc();
  return v8.getHeapStatistics().used_heap_size;
}

/** Bytes of heap per object `make(i)` returns, `n` of them kept. */
function perObject(n, make) {
  // Held by a global: a module-level array nothing reads later may be collected before the reading.
  const kept = (globalThis.kept = new Array(n).fill(null));
  const before = heapUsed();
  for (let i = 0; i < n; i++) kept[i] = make(i);
  const bytes = (heapUsed() - before) / n;
  globalThis.kept = undefined;
  return Math.round(bytes);
}

function flush(actor) {
  actor.takeUnwritten();
  actor.written();
  actor.takeUnpublished();
}

/** An actor of a page of likes; `viewer`: none, "held" now, or "left" (came, flushed, went). */
function actorOf(i, viewer) {
  const actor = new PageActor(host, `page-${viewer}-${i}`, i % 256, 0);
  actor.loaded({ likes: { dc1: { p: 1, n: 0 }, dc2: { p: 2, n: 0 } } });
  if (viewer !== "none") {
    actor.presenceTransitions("gateway-1", [`viewer-${i}`, HOLD_ACTIVE_SOCKET]);
    flush(actor);
  }
  if (viewer === "left") actor.presenceTransitions("gateway-1", [`viewer-${i}`, HOLD_DROPPED]);
  flush(actor);
  if ((viewer === "held") === actor.isIdle)
    throw new Error(`an actor with its viewer ${viewer} is idle: ${actor.isIdle}`);
  return actor;
}

function counterOf(replicas) {
  const c = new PNCounter();
  for (const dc of ["dc1", "dc2"].slice(0, replicas)) c.increment(dc, 5);
  return c;
}

console.log(`actors: ${N}, root: ${root}`);
console.log(
  `page of likes (two DCs):          ${perObject(N, (i) => actorOf(i, "none"))} bytes of V8 heap per actor`,
);
console.log(`the same with one viewer held:    ${perObject(N, (i) => actorOf(i, "held"))} bytes`);
console.log(`the same after a viewer left:     ${perObject(N, (i) => actorOf(i, "left"))} bytes`);
for (const replicas of [0, 1, 2])
  console.log(
    `PN-counter, ${replicas} replica(s):          ${perObject(N, () => counterOf(replicas))} bytes`,
  );
console.log(`empty Map:                        ${perObject(N, () => new Map())} bytes`);
