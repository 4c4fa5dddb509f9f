import { HOLD_DROPPED, HOLD_LEFT, ProtocolError, holdCode, type HoldCode } from "@livecount/protocol";
import type { Backoff, TimerHandle } from "@livecount/runtime";
import type { Hold } from "./local_presence.js";

/** What the presence forwarder (presence_forwarder.ts) keeps for one partition. */
export interface PartitionQueue {
  /**
   * Latest hold code per page and viewer: set semantics make older transitions of the same pair
   * irrelevant. Grouped by page as `presence_pages` carries them.
   */
  pages: Map<string, Map<string, HoldCode>>;
  /** Of the joins in `pages`, those not to count as unique visitors (PresencePages.unvisited), by page. */
  unvisited: Map<string, Set<string>>;
  /**
   * The owner refused `presence_pages` as a type it does not know: it is of an earlier release, and
   * gets `presence` batches until the partition's owner changes.
   */
  legacy: boolean;
  /**
   * The owner refused `presence_sync_part` as a type it does not know: a resync too large for one
   * request goes to it as a sync and joins, until the partition's owner changes.
   */
  wholeSyncs: boolean;
  /** The owner must get the whole contribution instead of deltas (new owner, reconnect). */
  sync: boolean;
  /**
   * Bumped whenever a sync is needed: a request of an older generation went to a former owner or
   * was superseded, so its answer (or failure) no longer matters and must not hold the queue up.
   */
  generation: number;
  /** Generation of the request in flight, if any. */
  inFlight: number | undefined;
  readonly backoff: Backoff;
  timer: TimerHandle | undefined;
}

export function partitionQueue(backoff: Backoff): PartitionQueue {
  return {
    pages: new Map(),
    unvisited: new Map(),
    legacy: false,
    wholeSyncs: false,
    sync: false,
    generation: 0,
    inFlight: undefined,
    backoff,
    timer: undefined,
  };
}

/**
 * An owner's refusal of a request type it does not know (the message of every release's decoder): any
 * other bad_frame is this gateway's or its configuration's fault, and the earlier form would not help.
 */
export function isUnknownType(err: unknown): boolean {
  return (
    err instanceof ProtocolError && err.code === "bad_frame" && err.message.includes("unknown message type")
  );
}

/** What this gateway holds of a viewer on a page, as the owner is told it (protocol presence_pages.ts). */
export function holdCodeOf(hold: Hold | undefined, drop: boolean): HoldCode {
  if (hold === undefined) return drop ? HOLD_DROPPED : HOLD_LEFT;
  return holdCode(hold.sockets, hold.active);
}
