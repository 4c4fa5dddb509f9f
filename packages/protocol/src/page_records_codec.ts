/**
 * The encoders of the messages that carry many pages' records: `ae_entries` (AeEntries: a heal or a
 * bootstrap sends every page of the differing buckets in them, thousands a message) and `updates`
 * (PageUpdates: what anti-entropy merged, to a DC's own gateways). Written by hand
 * (msgpack_writer.ts), the bytes msgpackr writes for the same message, so every release decodes them
 * alike: msgpackr built a list of keys for every object it packed (to leave out undefined values),
 * the largest part of what a node allocated in a heal.
 */
import type { Entries } from "@livecount/crdt";
import type { AeEntries } from "./anti_entropy_messages.js";
import type { PageUpdates } from "./internal.js";
import { MsgpackWriter, VALUE_BOUND, fixstrs, stringBound } from "./msgpack_writer.js";

const writer = new MsgpackWriter();

const TYPE = fixstrs("type", "ae_entries");
const UPDATES_TYPE = fixstrs("type", "updates");
const TS = fixstrs("ts");
const FROM = fixstrs("from");
const TO = fixstrs("to");
const PARTITION = fixstrs("partition");
const PAGES = fixstrs("pages");
const PULL = fixstrs("pull");
const DONE = fixstrs("done");
const FLOOR = fixstrs("floor");
const SENDER_LEARNING = fixstrs("senderLearning");

/** A page's record: per counter, per data center, its entry. */
type PageEntries = Readonly<Record<string, Entries>>;

/** The most bytes a page's record takes. */
function recordBound(page: string, record: PageEntries): number {
  let bound = stringBound(page) + VALUE_BOUND;
  for (const counter of Object.keys(record)) {
    bound += stringBound(counter) + VALUE_BOUND;
    for (const dc of Object.keys(record[counter]!)) bound += stringBound(dc) + 6 + 2 * VALUE_BOUND;
  }
  return bound;
}

/** A map's own keys and values, as msgpackr writes a plain object. */
function entries(record: Entries): void {
  const dcs = Object.keys(record);
  writer.map(dcs.length);
  for (const dc of dcs) {
    const e = record[dc]!;
    writer.string(dc);
    writer.entry(e);
  }
}

/** The key `pages` and a map of `pages`' records. */
function writePages(pages: ReadonlyArray<readonly [string, PageEntries]>): void {
  writer.raw(PAGES);
  writer.map(pages.length);
  for (const [page, record] of pages) {
    writer.string(page);
    const counters = Object.keys(record);
    writer.map(counters.length);
    for (const counter of counters) {
      writer.string(counter);
      entries(record[counter]!);
    }
  }
}

/** An `updates` message of `pages` (pairs of page and record), as `{ type, partition, pages, ts }`. */
export function encodePageUpdates(
  partition: PageUpdates["partition"],
  pages: ReadonlyArray<readonly [string, PageEntries]>,
  ts: PageUpdates["ts"],
): Uint8Array {
  let bound = 48 + 2 * VALUE_BOUND;
  for (const [page, record] of pages) bound += recordBound(page, record);
  writer.begin(bound);
  writer.map(4);
  writer.raw(UPDATES_TYPE);
  writer.raw(PARTITION);
  writer.natural(partition);
  writePages(pages);
  writer.raw(TS);
  writer.natural(ts);
  return writer.end();
}

/**
 * An `ae_entries` message of `pages` (pairs of page and record, as read from the store), its fields
 * in the order `{ type, from, to, partition, pages, pull, done, floor, senderLearning }`; the flags only when set.
 */
export function encodeAeEntries(
  head: Pick<AeEntries, "from" | "to" | "partition">,
  pages: ReadonlyArray<readonly [string, PageEntries]>,
  flags: Pick<AeEntries, "pull" | "done" | "floor" | "senderLearning"> = {},
): Uint8Array {
  const { pull, done, floor, senderLearning } = flags;
  // The keys, the type and the flags' values: 87 bytes at most.
  let bound = 96 + stringBound(head.from) + stringBound(head.to) + 3 * VALUE_BOUND;
  for (const [page, record] of pages) bound += recordBound(page, record);
  if (pull !== undefined) bound += VALUE_BOUND * (pull.length + 1);
  writer.begin(bound);
  writer.map(
    5 +
      Number(pull !== undefined) +
      Number(done !== undefined) +
      Number(floor !== undefined) +
      Number(senderLearning !== undefined),
  );
  writer.raw(TYPE);
  writer.raw(FROM);
  writer.string(head.from);
  writer.raw(TO);
  writer.string(head.to);
  writer.raw(PARTITION);
  writer.natural(head.partition);
  writePages(pages);
  if (pull !== undefined) {
    writer.raw(PULL);
    writer.array(pull.length);
    for (const bucket of pull) writer.natural(bucket);
  }
  if (done !== undefined) {
    writer.raw(DONE);
    writer.boolean(done);
  }
  if (floor !== undefined) {
    writer.raw(FLOOR);
    writer.natural(floor);
  }
  if (senderLearning !== undefined) {
    writer.raw(SENDER_LEARNING);
    writer.boolean(senderLearning);
  }
  return writer.end();
}
