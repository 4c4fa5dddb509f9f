import {
  HOLD_LEFT,
  activeOfCode,
  socketsOfCode,
  type HoldCode,
  type PageTransitions,
} from "@livecount/protocol";

/**
 * Bytes one presence request to an owner carries at most, as `viewerBytes` counts them: half of
 * NATS's default 1 MiB `max_payload` (as MAX_SNAPSHOT_REPLY_BYTES), or half of a smaller one. A
 * partition's presence goes in one request while it fits, and in several past it: one request
 * carries everything a gateway holds in the partition when it resyncs, and a hot page's audience on
 * one gateway passes 1 MiB (8,000 viewers of 128-character ids, 29,000 of the widget's). NATS
 * refuses such a message, and the gateway retried it for as long as the page was that full.
 */
export const MAX_PRESENCE_REQUEST_BYTES = 512 * 1024;

/** What a request carries besides its viewers (its type, gateway, partition, counts), with room. */
const REQUEST_BYTES = 1024;
/**
 * About what a page takes in a request besides its viewers, never less: its id with its array
 * headers, in a sync once in each per-page field (`pages`, `sockets`, `passive`, `unvisited`).
 */
export function pageBytes(page: string): number {
  return 4 * (page.length + 8);
}

/**
 * About what a viewer takes in a request, never less: its id (msgpack: the id and up to 3 bytes of
 * header) with its hold code, or in a sync its socket count and, for a viewer with no active socket,
 * its id again in `passive`; its id once more when it is in `unvisited`; and for an owner of an
 * earlier release (`presence` ops, one map per op) the page id and the op's keys.
 */
export function viewerBytes(
  page: string,
  viewer: string,
  code: HoldCode,
  unvisited: boolean,
  ops = false,
): number {
  let bytes = viewer.length + 8;
  if (code > HOLD_LEFT && !activeOfCode(code)) bytes += viewer.length + 3;
  if (unvisited) bytes += viewer.length + 3;
  if (ops) bytes += page.length + 40;
  return bytes;
}

/** One request's share of a partition's presence: transitions by page, and the joins not visitors. */
export interface PresenceChunk {
  readonly pages: PageTransitions[];
  readonly unvisited: Map<string, Set<string>>;
  /** Transitions it carries. */
  count: number;
}

/**
 * Cuts a partition's presence (each page's viewers and hold codes, in order) into requests of at
 * most `maxBytes`, a page's viewers in one request while they fit: at least one, empty when there
 * is nothing (a sync of nothing still says the gateway holds nothing there). A page cut in two keeps
 * its viewers' order, so the later of two transitions of one viewer is never sent first.
 */
export function presenceChunks(
  pages: Iterable<readonly [page: string, viewers: Iterable<readonly [viewer: string, code: HoldCode]>]>,
  unvisited: ReadonlyMap<string, ReadonlySet<string>>,
  maxBytes: number,
  ops = false,
): PresenceChunk[] {
  const budget = Math.max(maxBytes - REQUEST_BYTES, 1);
  const chunks: PresenceChunk[] = [];
  let chunk = emptyChunk();
  let bytes = 0;
  for (const [page, viewers] of pages) {
    const notVisitors = unvisited.get(page);
    let transitions: Array<string | HoldCode> | undefined;
    for (const [viewer, code] of viewers) {
      const cost = viewerBytes(page, viewer, code, notVisitors?.has(viewer) === true, ops);
      const pageCost = transitions === undefined ? pageBytes(page) : 0;
      // A viewer alone past the budget still goes, alone: the bus refuses it, as before.
      if (bytes + pageCost + cost > budget && chunk.count > 0) {
        chunks.push(chunk);
        chunk = emptyChunk();
        bytes = 0;
        transitions = undefined;
      }
      if (transitions === undefined) {
        transitions = [];
        chunk.pages.push([page, transitions]);
        bytes += pageBytes(page);
      }
      transitions.push(viewer, code);
      bytes += cost;
      chunk.count++;
      if (notVisitors?.has(viewer) === true) addTo(chunk.unvisited, page, viewer);
    }
  }
  chunks.push(chunk);
  return chunks;
}

/** Transitions by page (viewer, code, ...) as pairs, for presenceChunks. */
export function* pairsOf(
  pages: readonly PageTransitions[],
): Generator<[string, Generator<[string, HoldCode]>]> {
  for (const [page, transitions] of pages) {
    yield [
      page,
      (function* (): Generator<[string, HoldCode]> {
        for (let i = 0; i < transitions.length; i += 2)
          yield [transitions[i] as string, transitions[i + 1] as HoldCode];
      })(),
    ];
  }
}

/** A sync's fields for what one chunk holds (PresenceSync: only what differs from the defaults). */
export function syncFields(chunk: PresenceChunk): {
  pages: Array<[string, string[]]>;
  sockets: Array<[string, number[]]>;
  passive: Array<[string, string[]]>;
  unvisited: Array<[string, string[]]>;
} {
  const fields = {
    pages: [] as Array<[string, string[]]>,
    sockets: [] as Array<[string, number[]]>,
    passive: [] as Array<[string, string[]]>,
    unvisited: [] as Array<[string, string[]]>,
  };
  for (const [page, transitions] of chunk.pages) {
    const viewers: string[] = [];
    const counts: number[] = [];
    const idle: string[] = [];
    for (let i = 0; i < transitions.length; i += 2) {
      const viewer = transitions[i] as string;
      const code = transitions[i + 1] as HoldCode;
      viewers.push(viewer);
      counts.push(socketsOfCode(code));
      if (!activeOfCode(code)) idle.push(viewer);
    }
    fields.pages.push([page, viewers]);
    if (counts.some((n) => n !== 1)) fields.sockets.push([page, counts]);
    if (idle.length > 0) fields.passive.push([page, idle]);
    const notVisitors = chunk.unvisited.get(page);
    if (notVisitors !== undefined) fields.unvisited.push([page, [...notVisitors]]);
  }
  return fields;
}

function emptyChunk(): PresenceChunk {
  return { pages: [], unvisited: new Map(), count: 0 };
}

export function addTo(map: Map<string, Set<string>>, page: string, viewer: string): void {
  let viewers = map.get(page);
  if (viewers === undefined) map.set(page, (viewers = new Set()));
  viewers.add(viewer);
}
