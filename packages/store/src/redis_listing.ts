/**
 * The Redis store's listings (Store.listPages): page ids by prefix, in byte order, from the store's
 * page lists. One Redis has one list; Redis Cluster one per partition (each in its partition's slot),
 * which a listing merges: it reads a few ids past the cursor from every list at once, keeps the ids
 * no unread id can sort before, and reads further, with larger batches, only from the lists that
 * still bound the answer. The cursor is the last id returned, whichever list held it.
 */
import type { RedisConnection } from "./redis_connection.js";
import type { RedisKeys } from "./redis_keys.js";
import type { PageList } from "./store.js";
import { listStart } from "./validate.js";

/** Sorts after every printable ASCII character: the exclusive upper bound of a prefix range. */
const AFTER_PRINTABLE = "\u007f";
/**
 * Fewest ids read from each list in a merge's first round. With ids spread evenly over the lists,
 * twice the share of each list needed answers in one round almost always; a few more keep small
 * listings over many lists from needing a second.
 */
const MIN_BATCH = 8;

interface List {
  readonly key: string;
  readonly partition: number;
  /** Ids read so far, ascending. */
  readonly ids: string[];
  /** Read to the end of the range. */
  done: boolean;
}

const byteOrder = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

export async function listPages(
  conn: RedisConnection,
  keys: RedisKeys,
  partitions: number,
  { prefix, cursor, limit }: { prefix: string; cursor: string | undefined; limit: number },
): Promise<PageList> {
  const { from, exclusive } = listStart(prefix, cursor);
  const max = `(${prefix}${AFTER_PRINTABLE}`;
  // On one Redis every partition names the same list.
  const byKey = new Map<string, number>();
  for (let partition = 0; partition < partitions; partition++) {
    const key = keys.pages(partition);
    if (!byKey.has(key)) byKey.set(key, partition);
  }
  const lists: List[] = [...byKey].map(([key, partition]) => ({ key, partition, ids: [], done: false }));
  // One more than asked tells whether another page follows.
  const want = limit + 1;
  let batch = lists.length === 1 ? want : Math.max(MIN_BATCH, Math.ceil((2 * want) / lists.length));
  let reading = lists;
  for (;;) {
    const replies = await conn.run("listPages", (pipe) => {
      for (const list of reading) {
        const last = list.ids.at(-1);
        const min = last !== undefined ? `(${last}` : `${exclusive ? "(" : "["}${from}`;
        pipe(list.partition).zrangebylex(list.key, min, max, "LIMIT", 0, batch);
      }
    });
    reading.forEach((list, i) => {
      const ids = replies[i] as string[];
      list.ids.push(...ids);
      if (ids.length < batch) list.done = true;
    });
    // Ids up to the least last id of the lists not read to the end are final: nothing unread sorts
    // before it. (A list not done holds at least one id: it returned a full batch.)
    const open = lists.filter((list) => !list.done);
    const bound = open.map((list) => list.ids.at(-1)!).sort(byteOrder)[0];
    const read = lists.flatMap((list) => list.ids).sort(byteOrder);
    const known = bound === undefined ? read : read.filter((id) => id <= bound);
    if (known.length >= want || open.length === 0) {
      const pages = known.slice(0, limit);
      return { pages, cursor: known.length > limit ? pages.at(-1) : undefined };
    }
    // The answer ends at or before the want-th id read so far: read on only from the lists that
    // stop before it, as they may hold ids below it.
    const end = read[want - 1];
    reading = open.filter((list) => end === undefined || list.ids.at(-1)! < end);
    batch *= 2;
  }
}
