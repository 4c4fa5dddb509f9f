/** A gateway's resync of one partition (part of the bus protocol, internal.ts), whole or in parts. */

/**
 * The most parts one resync is sent in (PresenceSyncPart): 128 MiB of 512 KiB parts, a million
 * viewers of the longest ids in one partition on one gateway, well past what one gateway's
 * connections hold; the owner gathers the parts in memory until the last.
 */
export const MAX_SYNC_PARTS = 256;

/**
 * Gateway -> owner: part `part` (from 0) of `parts` (2 or more) of one PresenceSync too large for
 * one message, each part some of its pages or some of a page's viewers, in the same fields. The
 * owner applies nothing until it has them all, in order, from the same gateway for the same
 * partition, and then applies them as the one sync they make; a part out of order (one lost, or a
 * new resync begun) drops what it gathered and is refused. Owners of earlier releases refuse the
 * type: the gateway then sends the sync's first part as a PresenceSync and the rest as joins.
 */
export interface PresenceSyncPart extends Omit<PresenceSync, "type"> {
  readonly type: "presence_sync_part";
  readonly part: number;
  readonly parts: number;
}

/**
 * Gateway -> owner: the gateway's whole contribution to one partition, replacing whatever the owner
 * held for it. Sent when a partition gets a new owner and after a bus reconnect; past what one
 * message carries, in parts (PresenceSyncPart).
 */
export interface PresenceSync {
  readonly type: "presence_sync";
  readonly gateway: string;
  readonly partition: number;
  readonly pages: Readonly<Record<string, readonly string[]>>;
  /**
   * Per page, each listed viewer's socket count here, in the order of `pages` (absent, for a page or
   * for all: 1 each), as `PresenceOp.sockets`.
   */
  readonly sockets?: Readonly<Record<string, readonly number[]>>;
  /** Per page, the listed viewers none of whose sockets here is active (absent: none). */
  readonly passive?: Readonly<Record<string, readonly string[]>>;
  /**
   * Per page, the listed viewers that joined here as `PresencePages.unvisited` ones did (absent:
   * none): a viewer new to the owner that receives the sync does not count as a unique visitor for
   * them. Owners of earlier releases ignore it.
   */
  readonly unvisited?: Readonly<Record<string, readonly string[]>>;
  /** As `PresencePages.reconnects`. */
  readonly reconnects?: number;
}
