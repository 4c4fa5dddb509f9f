/**
 * The encoder of `update` messages (PageUpdate): an owner publishes one per changed page per flush,
 * the most frequent message a counter node sends. Written by hand (msgpack_writer.ts), the bytes
 * msgpackr writes for the same message, so every release decodes them alike: msgpackr spent most of
 * its time here walking each object's keys to leave out undefined values (7.4% of the node's busy
 * samples in the counter benchmark's profile, 4.3% written by hand; docs/benchmarks.md).
 */
import type { Entry } from "@livecount/crdt";
import type { PageUpdate } from "./internal.js";
import { MsgpackWriter, VALUE_BOUND, fixstrs, stringBound } from "./msgpack_writer.js";

const writer = new MsgpackWriter();

/** A map of five, `type` and its value and the key `page`; then the other keys, in the owner's order. */
const HEAD = Uint8Array.from([0x85, ...fixstrs("type", "update", "page")]);
const DC_KEY = fixstrs("dc");
const COUNTERS_KEY = fixstrs("counters");
const TS_KEY = fixstrs("ts");

/** One counter's entry, `{p, n}`, after its name. */
function entry(e: Entry, name: string): void {
  writer.string(name);
  writer.entry(e);
}

/**
 * An `update` message. Its entries come as a Map, a msgpack map like a record's: an owner publishes
 * time buckets (`@u:<day>:<register>`, `@pm:<minute>`), names new on nearly every page, which added
 * to a plain object each cost V8 a new hidden class, several microseconds an entry.
 */
export function encodePageUpdate(
  update: Omit<PageUpdate, "counters"> & { readonly counters: ReadonlyMap<string, Entry> },
): Uint8Array {
  const { page, dc, counters, ts } = update;
  let bound = 32 + stringBound(page) + stringBound(dc) + 2 * VALUE_BOUND;
  counters.forEach((_, name) => (bound += stringBound(name) + 6 + 2 * VALUE_BOUND));
  writer.begin(bound);
  writer.raw(HEAD);
  writer.string(page);
  writer.raw(DC_KEY);
  writer.string(dc);
  writer.raw(COUNTERS_KEY);
  writer.map(counters.size);
  counters.forEach(entry);
  writer.raw(TS_KEY);
  writer.natural(ts);
  return writer.end();
}
