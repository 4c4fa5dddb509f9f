/**
 * Anti-entropy sends pages in messages that must stay under NATS's payload limit (1 MiB by default).
 * A page's time buckets (a day of window buckets per counter, 4096 visitor registers per day and DC)
 * make a busy page about 360 KB (page_chunks.test.ts prints it), so a few of them pass the limit:
 * messages are cut by what their entries take, not by pages, and a page larger than what a message
 * has left goes in parts. Entries merge one by one (per-entry max), so a part is as good as the
 * whole; a page's counters go before its time buckets, so the first part of a page a store does not
 * hold brings what makes it a page there.
 */
import type { Entry } from "@livecount/crdt";
import { isSeriesCounter } from "@livecount/protocol";
import type { PageRecord } from "@livecount/store";

/**
 * Bytes one message carries at most, as `entryBytes` and `pageBytes` count them: half of NATS's
 * default 1 MiB (as the gateways' presence requests and snapshot replies), or half of a smaller
 * `max_payload`. Messages were cut at 8,000 entries alone, which assumed 60 bytes an entry: pages
 * of one entry each (likes written in one DC, with no viewer) and ids of 110 characters took 1 MiB,
 * the bus refused the message, and every later try of the partition's heal or bootstrap failed the
 * same way.
 */
export const MAX_ENTRIES_MESSAGE_BYTES = 512 * 1024;

/**
 * Entries one message carries at most, whatever their bytes: the receiving DC merges a message into
 * its Redis in one script call, which holds Redis for its whole length (about 50 us a page), so a
 * message of small entries is no longer to merge than before the byte bound (512 KiB of them would
 * be up to 11,000).
 */
export const ENTRIES_PER_MESSAGE = 8000;

/** What a message carries besides its pages (its type, DCs, partition, flags), with room. */
const MESSAGE_BYTES = 512;

/**
 * What a string takes in msgpack at most: ids and counter names are ASCII (ids.ts), a byte a
 * character, with a header of up to 5 bytes.
 */
const stringBytes = (s: string): number => s.length + 5;

/** A page in a message besides its entries: its id and its record's map header. */
export const pageBytes = (page: string): number => stringBytes(page) + 5;

/** An entry: its counter's name and map header (paid per entry: never less), its DC and `{p, n}`. */
export const entryBytes = (counter: string, dc: string): number =>
  stringBytes(counter) + 5 + stringBytes(dc) + 23;

/**
 * Groups pages into messages of at most `maxBytes` and `maxEntries`, splitting pages larger than
 * what is left.
 */
export function* chunkPages(
  pages: Iterable<readonly [string, PageRecord]>,
  maxBytes: number = MAX_ENTRIES_MESSAGE_BYTES,
  maxEntries: number = ENTRIES_PER_MESSAGE,
): Generator<Array<[string, PageRecord]>> {
  const max = Math.max(maxBytes - MESSAGE_BYTES, 1);
  let chunk: Array<[string, PageRecord]> = [];
  let size = 0;
  let count = 0;
  for (const [page, record] of pages) {
    // A page that fits in what the message has left goes as it is: nothing to cut or reorder.
    const bytes = recordBytes(page, record);
    const entries = entryCount(record);
    if (size + bytes <= max && count + entries <= maxEntries) {
      chunk.push([page, record]);
      size += bytes;
      count += entries;
      continue;
    }
    let part: PageRecord = {};
    let partSize = pageBytes(page);
    let partEntries = 0;
    const counters = Object.entries(record).sort(
      ([a], [b]) => Number(isSeriesCounter(a)) - Number(isSeriesCounter(b)),
    );
    for (const [counter, dcs] of counters) {
      for (const [dc, entry] of Object.entries(dcs)) {
        const cost = entryBytes(counter, dc);
        const full = size + partSize + cost > max || count + partEntries + 1 > maxEntries;
        // An entry alone past the bound still goes, alone: nothing smaller can carry it.
        if (full && (chunk.length > 0 || partEntries > 0)) {
          if (partEntries > 0) chunk.push([page, part]);
          yield chunk;
          chunk = [];
          size = 0;
          count = 0;
          part = {};
          partSize = pageBytes(page);
          partEntries = 0;
        }
        addEntry(part, counter, dc, entry);
        partSize += cost;
        partEntries++;
      }
    }
    // A page without entries still goes (the receiver learns nothing from it, but it was asked for),
    // in the next message when this one has no room for its id.
    if (partEntries === 0 && size + partSize > max && chunk.length > 0) {
      yield chunk;
      chunk = [];
      size = 0;
      count = 0;
    }
    chunk.push([page, part]);
    size += partSize;
    count += partEntries;
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

/** What a whole page takes in a message. */
function recordBytes(page: string, record: PageRecord): number {
  let n = pageBytes(page);
  for (const counter of Object.keys(record))
    for (const dc of Object.keys(record[counter]!)) n += entryBytes(counter, dc);
  return n;
}

function addEntry(record: PageRecord, counter: string, dc: string, entry: Entry): void {
  if (!Object.hasOwn(record, counter)) setOwn(record, counter, {});
  setOwn(record[counter]!, dc, entry);
}
