/**
 * Anti-entropy sends pages in messages that must stay under NATS's payload limit (1 MB by default).
 * A page's time buckets (a day of window buckets per counter, 4096 visitor registers per day and DC)
 * make a busy page about 360 KB (page_chunks.test.ts prints it), so a few of them pass the limit:
 * messages are cut by entries, not pages, and a page larger than what a message has left goes in
 * parts. Entries merge one by one (per-entry max), so a part is as good as the whole;
 * a page's counters go before its time buckets, so the first part of a page a store does not hold
 * brings what makes it a page there.
 */
import type { Entry } from "@livecount/crdt";
import { isSeriesCounter } from "@livecount/protocol";
import type { PageRecord } from "@livecount/store";

/**
 * Entries per message: about 60 bytes each in msgpack (page ids are sent once per page), so a
 * message stays near 500 KB, half the limit.
 */
export const ENTRIES_PER_MESSAGE = 8000;

/** Groups pages into messages of at most `max` entries, splitting pages larger than what is left. */
export function* chunkPages(
  pages: Iterable<readonly [string, PageRecord]>,
  max: number = ENTRIES_PER_MESSAGE,
): Generator<Array<[string, PageRecord]>> {
  let chunk: Array<[string, PageRecord]> = [];
  let size = 0;
  for (const [page, record] of pages) {
    // A page that fits in what the message has left goes as it is: nothing to cut or reorder.
    const count = entryCount(record);
    if (size + count <= max) {
      chunk.push([page, record]);
      size += count;
      if (size >= max) {
        yield chunk;
        chunk = [];
        size = 0;
      }
      continue;
    }
    let part: PageRecord = {};
    let partSize = 0;
    const counters = Object.entries(record).sort(
      ([a], [b]) => Number(isSeriesCounter(a)) - Number(isSeriesCounter(b)),
    );
    for (const [counter, entries] of counters) {
      for (const [dc, entry] of Object.entries(entries)) {
        if (size + partSize >= max) {
          if (partSize > 0) chunk.push([page, part]);
          yield chunk;
          chunk = [];
          size = 0;
          part = {};
          partSize = 0;
        }
        addEntry(part, counter, dc, entry);
        partSize++;
      }
    }
    // A page without entries still goes (the receiver learns nothing from it, but it was asked for).
    chunk.push([page, part]);
    size += partSize;
  }
  if (chunk.length > 0) yield chunk;
}

/**
 * The pages of `records` without their time buckets, as a DC's gateways get what anti-entropy
 * brought (they show no time bucket); pages left with nothing are left out.
 */
export function countsOf(records: ReadonlyMap<string, PageRecord>): Array<[string, PageRecord]> {
  const out: Array<[string, PageRecord]> = [];
  for (const [page, record] of records) {
    const names = Object.keys(record);
    const counts = names.filter((counter) => !isSeriesCounter(counter));
    if (counts.length === 0) continue;
    // No time bucket: the record goes as it is (it is only read from here on).
    if (counts.length === names.length) {
      out.push([page, record]);
      continue;
    }
    const kept: PageRecord = {};
    for (const counter of counts) setOwn(kept, counter, record[counter]!);
    out.push([page, kept]);
  }
  return out;
}

/** Whether a page's record holds anything but time buckets: what its actor takes. */
export function hasCounts(record: PageRecord): boolean {
  for (const counter of Object.keys(record)) if (!isSeriesCounter(counter)) return true;
  return false;
}

/** `target[key] = value` as an own property, so a counter or DC named "__proto__" stays one. */
function setOwn<T>(target: Record<string, T>, key: string, value: T): void {
  if (key === "__proto__")
    Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  else target[key] = value;
}

function entryCount(record: PageRecord): number {
  let n = 0;
  for (const entries of Object.values(record)) n += Object.keys(entries).length;
  return n;
}

function addEntry(record: PageRecord, counter: string, dc: string, entry: Entry): void {
  if (!Object.hasOwn(record, counter)) setOwn(record, counter, {});
  setOwn(record[counter]!, dc, entry);
}
