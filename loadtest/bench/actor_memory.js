/**
 * What one page actor costs a counter node's V8 heap while it is resident: N actors of the built
 * counter (`apps/counter/dist`), loaded with a page of likes from two DCs, some with one viewer held
 * by a gateway, flushed (their writes taken, written and published) and kept; the heap measured after
 * full collections before and after. The page ids are counted in. Not part of `run.js`: a tool for
 * the actors' memory (`LIVECOUNT_MAX_ACTORS`), deterministic where RSS is not.
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
const dist = (file) => pathToFileURL(resolve(root, "apps/counter/dist", file)).href;
const { PageActor } = await import(dist("page_actor.js"));
const { VisitorHash } = await import(dist("visitor_hash.js"));
const { holdCode } = await import(pathToFileURL(resolve(root, "packages/protocol/dist/index.js")).href);
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

function measure(withViewer) {
  // Held by a global: a module-level array nothing reads later may be collected before the reading.
  const actors = (globalThis.actors = new Array(N).fill(null));
  const before = heapUsed();
  for (let i = 0; i < N; i++) {
    const actor = new PageActor(host, `page-${withViewer ? "v" : "l"}-${i}`, i % 256, 0);
    actor.loaded({ likes: { dc1: { p: 1, n: 0 }, dc2: { p: 2, n: 0 } } });
    if (withViewer) actor.presenceTransitions("gateway-1", [`viewer-${i}`, HOLD_ACTIVE_SOCKET]);
    actor.takeUnwritten();
    actor.written();
    actor.takeUnpublished();
    actors[i] = actor;
  }
  const bytes = (heapUsed() - before) / N;
  globalThis.actors = undefined;
  return Math.round(bytes);
}

console.log(`actors: ${N}, root: ${root}`);
console.log(`page of likes (two DCs):         ${measure(false)} bytes of V8 heap per actor`);
console.log(`the same with one viewer held:   ${measure(true)} bytes of V8 heap per actor`);
