/**
 * Presence transitions grouped by page, each a viewer key and one number, and their decoder (part
 * of the bus codec, internal_codec.ts). This is what a gateway sends its pages' owners for every
 * viewer that arrives, leaves or changes: the counter node's busiest request. A `presence` batch
 * carries the same transitions as one map per op, the page id repeated in each; decoded, each op is
 * a Map and then an object: a sixth of the bytes the node allocated in the counter benchmark
 * (docs/benchmarks.md, "counter"). Here a page's transitions are one flat array, decoded into
 * nothing else.
 */
import { isInternalId, isPageId, isViewerKey } from "./ids.js";
import { MAX_VIEWER_SOCKETS, type InternalMessage, type NodeRequest, type PresenceOp } from "./internal.js";
import { field, isNatural, malformed, optionalNaturals, type Fields } from "./internal_fields.js";

/** The viewer no longer counts here; it lingers at the owner for the grace window (`present: false`). */
export const HOLD_LEFT = 0;
/** The viewer no longer counts here and ends at once unless another gateway holds it (`drop: true`). */
export const HOLD_DROPPED = -1;

/**
 * What a gateway holds of a viewer on a page, as one number: HOLD_LEFT, HOLD_DROPPED, or for a
 * viewer it holds, `2 * sockets + (active ? 1 : 0)` with 1 <= `sockets` <= MAX_VIEWER_SOCKETS (one
 * active socket: 3).
 */
export type HoldCode = number;

/** The code of a viewer held with `sockets` (>= 1) sockets, any of them active or not. */
export function holdCode(sockets: number, active: boolean): HoldCode {
  return 2 * sockets + (active ? 1 : 0);
}

/** Sockets of a held viewer's code (>= 2). */
export function socketsOfCode(code: HoldCode): number {
  return Math.floor(code / 2);
}

/** Whether any socket of a held viewer's code (>= 2) is active. */
export function activeOfCode(code: HoldCode): boolean {
  return code % 2 === 1;
}

/** The code of what an op says (PresenceOp: absent sockets 1, absent active true). */
export function codeOf(op: Omit<PresenceOp, "page">): HoldCode {
  if (!op.present) return op.drop === true ? HOLD_DROPPED : HOLD_LEFT;
  return holdCode(op.sockets ?? 1, op.active ?? true);
}

/** Ops of one page as transitions: a `presence` batch read the way `presence_pages` is. */
export function transitionsOf(ops: ReadonlyArray<Omit<PresenceOp, "page">>): Array<string | HoldCode> {
  const transitions: Array<string | HoldCode> = [];
  for (const op of ops) transitions.push(op.viewer, codeOf(op));
  return transitions;
}

/** A page's transitions as `presence` ops, defaults (one socket, active) left out: for owners of earlier releases. */
export function opsOf([page, transitions]: PageTransitions): PresenceOp[] {
  const ops: PresenceOp[] = [];
  for (let i = 0; i < transitions.length; i += 2) {
    const viewer = transitions[i] as string;
    const code = transitions[i + 1] as HoldCode;
    if (code === HOLD_LEFT) ops.push({ page, viewer, present: false });
    else if (code === HOLD_DROPPED) ops.push({ page, viewer, present: false, drop: true });
    else {
      const sockets = socketsOfCode(code);
      ops.push({
        page,
        viewer,
        present: true,
        ...(sockets !== 1 ? { sockets } : {}),
        ...(activeOfCode(code) ? {} : { active: false }),
      });
    }
  }
  return ops;
}

function isHoldCode(v: unknown): v is HoldCode {
  return (
    Number.isSafeInteger(v) &&
    (((v as number) >= 2 && (v as number) <= holdCode(MAX_VIEWER_SOCKETS, true)) ||
      v === HOLD_LEFT ||
      v === HOLD_DROPPED)
  );
}

/** One page's transitions in order: viewer key, hold code, viewer key, hold code, ... */
export type PageTransitions = readonly [page: string, transitions: ReadonlyArray<string | HoldCode>];

/**
 * Gateway -> owner: viewer transitions on pages of one partition, grouped by page, in order per
 * page; one batch in flight per partition, as `presence` (which owners still take, from gateways of
 * earlier releases). An owner of an earlier release answers bad_frame: the gateway then sends the
 * same transitions as `presence`.
 */
export interface PresencePages {
  readonly type: "presence_pages";
  /** Gateway incarnation: a new id every process start, so a restarted gateway is a new contributor. */
  readonly gateway: string;
  readonly partition: number;
  readonly pages: readonly PageTransitions[];
  /**
   * How often the gateway's bus connection came back (absent: never), as `NodeHeartbeat.reconnects`.
   * A message sent over an earlier connection, which a NATS server held and passed on late (frozen,
   * then thawed), is older than the resync the gateway sent since: an owner that heard a higher
   * count from the gateway drops it.
   */
  readonly reconnects?: number;
  /**
   * Viewers joining here, by page, that are not to be counted as unique visitors: their client
   * address had spent its budget of new viewer ids (LIVECOUNT_NEW_VISITOR_RATE). They count as
   * viewers all the same. Owners of earlier releases ignore it.
   */
  readonly unvisited?: readonly PageViewers[];
}

/** Viewer keys on one page. */
export type PageViewers = readonly [page: string, viewers: readonly string[]];

function pageViewersOf(v: unknown): readonly PageViewers[] {
  if (!Array.isArray(v)) malformed("unvisited must be an array");
  for (const item of v) {
    if (!Array.isArray(item) || item.length !== 2 || !isPageId(item[0]) || !Array.isArray(item[1]))
      malformed("each unvisited entry must be [page id, viewer keys]");
    for (const viewer of item[1] as unknown[]) if (!isViewerKey(viewer)) malformed("viewer key is malformed");
  }
  return v as readonly PageViewers[];
}

/**
 * The pages of a `presence_pages` request, checked in place: the arrays msgpack decoded are the
 * message's, so nothing is copied.
 */
function pageTransitionsOf(v: unknown): readonly PageTransitions[] {
  if (!Array.isArray(v)) malformed("pages must be an array");
  for (const item of v) {
    if (!Array.isArray(item) || item.length !== 2 || !isPageId(item[0]))
      malformed("each page must be [page id, transitions]");
    const transitions: unknown = item[1];
    // A page without transitions would still load its actor at the owner: nothing sends one.
    if (!Array.isArray(transitions) || transitions.length === 0 || transitions.length % 2 !== 0)
      malformed("transitions must be one or more viewer key and hold code pairs");
    for (let i = 0; i < transitions.length; i += 2) {
      if (!isViewerKey(transitions[i])) malformed("viewer key is malformed");
      if (!isHoldCode(transitions[i + 1])) malformed("hold code is malformed");
    }
  }
  return v as readonly PageTransitions[];
}

/** The decoders of this file's messages; `withHop` adds a request's forwarding count. */
export function presencePagesDecoders(
  withHop: (m: Fields, request: NodeRequest) => NodeRequest,
): ReadonlyArray<readonly [string, (m: Fields) => InternalMessage]> {
  return [
    [
      "presence_pages",
      (m) =>
        withHop(m, {
          type: "presence_pages",
          gateway: field(m, "gateway", isInternalId),
          partition: field(m, "partition", isNatural),
          pages: pageTransitionsOf(m.get("pages")),
          ...optionalNaturals(m, "reconnects"),
          ...(m.has("unvisited") ? { unvisited: pageViewersOf(m.get("unvisited")) } : {}),
        }),
    ],
  ];
}
