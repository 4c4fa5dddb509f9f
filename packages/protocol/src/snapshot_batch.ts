/**
 * Snapshots of several pages in one bus request, and their decoders (part of the bus codec,
 * internal_codec.ts). A gateway takes a snapshot of every page it starts watching; after a restart
 * it starts watching every page at once. The pages it starts watching in one turn go to their
 * owners in one request per partition, and each is answered on its own, as a `snapshot` of it
 * would be.
 */
import { answerOf } from "./increment_codec.js";
import { isPageId } from "./ids.js";
import type { ErrorReply, InternalMessage, NodeRequest, PageStateReply } from "./internal.js";
import {
  batchOf,
  entriesOf,
  field,
  isCounterKey,
  isNatural,
  pageIdOf,
  recordOf,
  type Fields,
} from "./internal_fields.js";

/** The most pages one `snapshots` request names. */
export const MAX_SNAPSHOT_BATCH = 256;

/**
 * Bytes one `page_states` reply carries at most, as pageStateBytes counts them: half of NATS's
 * default 1 MB payload. Pages past it are answered `payload_too_large` and asked for again on
 * their own.
 */
export const MAX_SNAPSHOT_REPLY_BYTES = 512 * 1024;

/**
 * About what a page state takes in msgpack, never less: its page id and every counter name, data
 * center id and entry (ids and names are ASCII, a byte a character), with room for the headers
 * and the largest numbers.
 */
export function pageStateBytes(state: PageStateReply): number {
  let bytes = 48 + state.page.length;
  for (const [counter, entries] of Object.entries(state.counters)) {
    bytes += 5 + counter.length;
    for (const dc of Object.keys(entries)) bytes += 27 + dc.length;
  }
  return bytes;
}

/**
 * Gateway -> owner: snapshots of 1..MAX_SNAPSHOT_BATCH pages. Each page is handled (forwarded when
 * another node owns it) and answered on its own, in order (`SnapshotsReply`).
 */
export interface SnapshotsRequest {
  readonly type: "snapshots";
  readonly pages: readonly string[];
}

/** The answers to a `snapshots` request: one per page, in the request's order. */
export interface SnapshotsReply {
  readonly type: "page_states";
  readonly replies: ReadonlyArray<PageStateReply | ErrorReply>;
}

/** A `page_state` message's fields as the reply. */
export function pageStateOf(m: Fields): PageStateReply {
  return {
    type: "page_state",
    page: field(m, "page", isPageId),
    counters: recordOf(m.get("counters"), isCounterKey, entriesOf, "counters"),
    ts: field(m, "ts", isNatural),
  };
}

/** One answer of a `page_states` reply: a page state or an error. */
const stateReplyOf = answerOf("page_state", pageStateOf, "a page_states");

/** The decoders of this file's messages; `withHop` adds a request's forwarding count. */
export function snapshotDecoders(
  withHop: (m: Fields, request: NodeRequest) => NodeRequest,
): ReadonlyArray<readonly [string, (m: Fields) => InternalMessage]> {
  return [
    [
      "snapshots",
      (m) =>
        withHop(m, {
          type: "snapshots",
          pages: batchOf(m.get("pages"), pageIdOf, "pages", MAX_SNAPSHOT_BATCH),
        }),
    ],
    [
      "page_states",
      (m) => ({
        type: "page_states",
        replies: batchOf(m.get("replies"), stateReplyOf, "replies", MAX_SNAPSHOT_BATCH),
      }),
    ],
  ];
}
