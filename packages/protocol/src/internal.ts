/**
 * Messages between gateways and counter nodes on the bus (msgpack). These are internal: they may
 * change between releases, unlike the public frames in frames.ts.
 */
import type { Entries, Entry } from "@livecount/crdt";
import type { ErrorCode } from "./errors.js";
import type { IncrementsReply, IncrementsRequest } from "./increment_codec.js";
import type { PresencePages } from "./presence_pages.js";
import type { PresenceSync, PresenceSyncPart } from "./presence_sync.js";
import type { SnapshotsReply, SnapshotsRequest } from "./snapshot_batch.js";
import type { AntiEntropyMessage } from "./anti_entropy_messages.js";
import type { AppliedKeys, KeysAck } from "./applied_keys.js";

export * from "./anti_entropy_messages.js";
export * from "./presence_sync.js";

/** One viewer's presence on one page at one gateway. Set semantics: applying it twice is harmless. */
export interface PresenceOp {
  readonly page: string;
  /** Namespaced viewer key: "v:<client viewer id>" or "s:<gateway incarnation>:<socket seq>". */
  readonly viewer: string;
  readonly present: boolean;
  /**
   * With `present: false`: the viewer stops counting at once, without the grace window, unless
   * another gateway still holds it. Sent when a socket moves to another viewer id of the page: one
   * socket is at most one viewer, so the id it left must not linger as a ghost.
   */
  readonly drop?: boolean;
  /** With `present: true`: how many of the gateway's sockets count as the viewer there (absent: 1). */
  readonly sockets?: number;
  /** With `present: true`: whether any of those sockets is active (absent: true). */
  readonly active?: boolean;
}

/**
 * Gateway -> owner: viewer transitions on pages of one partition, in order, one batch in flight.
 * Gateways send `presence_pages` (the same transitions, grouped by page); owners take both.
 */
export interface PresenceBatch {
  readonly type: "presence";
  /** Gateway incarnation: a new id every process start, so a restarted gateway is a new contributor. */
  readonly gateway: string;
  readonly partition: number;
  readonly ops: readonly PresenceOp[];
  /** As `PresencePages.reconnects`. */
  readonly reconnects?: number;
}

/** Anyone -> owner: every data center's entries of a page, for a read or a new watcher. */
export interface SnapshotRequest {
  readonly type: "snapshot";
  readonly page: string;
}

/** Publisher -> owner: a durable counter change with its idempotency key. */
export interface IncrementRequest {
  readonly type: "increment";
  readonly page: string;
  readonly counter: string;
  /** Signed change; negative decrements. */
  readonly delta: number;
  readonly key: string;
}

/**
 * Publisher -> owner: an observed reset of a counter to zero, idempotent by key. The owner cancels
 * the value it observes (increments made concurrently elsewhere survive). With `tombstone` it is a
 * delete: the owner also records the counter's activity in its tombstone (visibility.ts).
 */
export interface ResetRequest {
  readonly type: "reset";
  readonly page: string;
  readonly counter: string;
  readonly key: string;
  readonly tombstone: boolean;
}

/** Gateway -> any counter node: ids of pages under a prefix, from the store, in byte order. */
export interface ListPagesRequest {
  readonly type: "list_pages";
  /** 0..128 printable ASCII; empty lists every page. */
  readonly prefix: string;
  /** The last page id of the previous answer; absent for the first. */
  readonly cursor?: string;
  /** 1..MAX_LIST_PAGES. */
  readonly limit: number;
}

/** Gateway -> one counter node: what it holds, for the operators' status API. Never forwarded. */
export interface NodeStatusRequest {
  readonly type: "node_status";
}

/**
 * Gateway -> one counter node of its DC: purge tombstones (deleted counters) that changed in this
 * DC's store more than `olderThanMs` ago, in every partition the node serves. The node then asks
 * every DC for the same in its heartbeats (`DcHeartbeat.purgeBefore`). Never forwarded.
 */
export interface PurgeRequest {
  readonly type: "purge";
  readonly olderThanMs: number;
}

/** Anyone -> owner: the sum of a counter's changes over the last `seconds` (its window buckets). */
export interface WindowRequest {
  readonly type: "window";
  readonly page: string;
  readonly counter: string;
  /** 1..MAX_WINDOW_S. */
  readonly seconds: number;
}

/** Anyone -> owner: a page's state with its peaks and unique visitors (`GET /v1/pages/{page}/stats`). */
export interface StatsRequest {
  readonly type: "stats";
  readonly page: string;
}

/** The most page ids one list_pages request may ask for. */
export const MAX_LIST_PAGES = 1000;

/** How many times a request was forwarded between nodes that disagree about the owner (absent: 0). */
export interface Forwardable {
  readonly hop?: number;
}

export type NodeRequest = (
  | PresenceBatch
  | PresencePages
  | PresenceSync
  | PresenceSyncPart
  | SnapshotRequest
  | SnapshotsRequest
  | IncrementRequest
  | IncrementsRequest
  | ResetRequest
  | ListPagesRequest
  | NodeStatusRequest
  | PurgeRequest
  | WindowRequest
  | StatsRequest
) &
  Forwardable;

export interface AckReply {
  readonly type: "ack";
}

/** A page's state: every data center's entry of every counter; presence under VIEWERS_COUNTER. */
export interface PageStateReply {
  readonly type: "page_state";
  readonly page: string;
  readonly counters: Readonly<Record<string, Entries>>;
  readonly ts: number;
}

export interface IncrementReply {
  readonly type: "incremented";
  readonly page: string;
  readonly counter: string;
  /** The counter's value over all data centers right after this change. */
  readonly value: number;
  readonly updatedAt: number;
  /** True when the key had been applied before: this is the original answer, nothing was counted. */
  readonly duplicate: boolean;
}

export interface ResetReply {
  readonly type: "counter_reset";
  readonly page: string;
  readonly counter: string;
  /** The value the reset cancelled, as the owner observed it (the counter is 0 right after). */
  readonly previous: number;
  readonly updatedAt: number;
  /** True when the key had been applied before: this is the original answer, nothing changed. */
  readonly duplicate: boolean;
}

/** The sum of a counter's changes in the window asked for, over every data center. */
export interface WindowReply {
  readonly type: "window_total";
  readonly page: string;
  readonly counter: string;
  readonly seconds: number;
  readonly value: number;
  readonly ts: number;
}

/**
 * A page's state (as a snapshot) with the most viewers the owner's DC showed in the last hour and
 * day, and the distinct visitors of the current and previous UTC day over every DC (estimated).
 */
export interface PageStatsReply {
  readonly type: "page_stats";
  readonly page: string;
  readonly counters: Readonly<Record<string, Entries>>;
  readonly peak1h: number;
  readonly peak24h: number;
  readonly unique24h: number;
  readonly ts: number;
}

export interface PageListReply {
  readonly type: "page_list";
  readonly pages: readonly string[];
  /** Pass back as `cursor` for the next ids; absent after the last. */
  readonly cursor?: string;
}

/** A counter node's own state (GET /v1/admin/status). */
export interface NodeInfoReply {
  readonly type: "node_info";
  readonly node: string;
  /** New at every start, and when the node lost presence state without restarting. */
  readonly incarnation: string;
  /** Holds and serves every partition the ring gives it. */
  readonly ready: boolean;
  /** Partitions whose lease it holds, with the lease's epoch (its fence), in order. */
  readonly partitions: readonly (readonly [partition: number, epoch: number])[];
  /** Page actors in memory. */
  readonly actors: number;
  /** Pages with changes waiting for the next flush to the store. */
  readonly dirty: number;
  /** How long the oldest change not yet durable has waited, in ms (0 when none waits). */
  readonly flushLagMs: number;
  /** Held partitions that have learnt every peer DC's state (bootstrap, docs/architecture.md). */
  readonly bootstrapped: number;
  /** Per remote DC, partitions whose anti-entropy transfer this node drives right now. */
  readonly resyncing: Readonly<Record<string, number>>;
  readonly ts: number;
}

/** What one counter node purged (POST /v1/admin/purge). */
export interface PurgedReply {
  readonly type: "purged";
  readonly node: string;
  /** Epoch-ms: tombstones that changed at this time or earlier were looked at. */
  readonly before: number;
  /** Pages that lost deleted counters. */
  readonly pages: number;
  /** Deleted counters purged, with their tombstones. */
  readonly counters: number;
  /** Deleted counters old enough that had to stay (docs/architecture.md, "Purging tombstones"). */
  readonly kept: number;
  /** Partitions the node could not purge now (store errors); a later purge goes on with them. */
  readonly failed: number;
  /**
   * Partitions where tombstones old enough wait until every other DC is known to hold them
   * (anti-entropy finds the partition equal); they go then, without asking again.
   */
  readonly waiting: number;
}

export interface ErrorReply {
  readonly type: "error";
  readonly code: ErrorCode;
  readonly message: string;
}

export type NodeReply =
  | AckReply
  | PageStateReply
  | SnapshotsReply
  | IncrementReply
  | IncrementsReply
  | ResetReply
  | PageListReply
  | NodeInfoReply
  | PurgedReply
  | WindowReply
  | PageStatsReply
  | ErrorReply;

/** The reply each kind of request gets when it succeeds. */
export interface RepliesByRequest {
  readonly presence: AckReply;
  readonly presence_pages: AckReply;
  readonly presence_sync: AckReply;
  readonly presence_sync_part: AckReply;
  readonly snapshot: PageStateReply;
  readonly snapshots: SnapshotsReply;
  readonly increment: IncrementReply;
  readonly increments: IncrementsReply;
  readonly reset: ResetReply;
  readonly list_pages: PageListReply;
  readonly node_status: NodeInfoReply;
  readonly purge: PurgedReply;
  readonly window: WindowReply;
  readonly stats: PageStatsReply;
}

/** The successful reply to `T`: a snapshot request gets a PageStateReply, not the whole union. */
export type ReplyTo<T extends NodeRequest> = RepliesByRequest[T["type"]];

/**
 * Owner -> page subject (every data center): its data center's entries of the page, after they are
 * durable. Idempotent and commutative to merge, so duplicates and reordering change nothing.
 */
export interface PageUpdate {
  readonly type: "update";
  readonly page: string;
  readonly dc: string;
  readonly counters: Readonly<Record<string, Entry>>;
  readonly ts: number;
}

/**
 * A counter node -> the gateways of its own DC: what anti-entropy brought into its store for pages of
 * one partition, every DC's entries that advanced, after they are durable. One message for many pages:
 * a heal moves thousands at once, and only gateways watching pages of the partition subscribe.
 */
export interface PageUpdates {
  readonly type: "updates";
  readonly partition: number;
  readonly pages: Readonly<Record<string, Readonly<Record<string, Entries>>>>;
  readonly ts: number;
  /**
   * Set (to the lease's epoch), with no pages, when the node began serving the partition: whatever
   * its earlier owner published last may never have come (published while cut off the bus, or lost
   * as it died between a durable write and its publish). Gateways re-take the snapshots of the
   * partition's watched pages. Absent from releases before it; gateways of those ignore it.
   */
  readonly taken?: number;
}

/** Gateway heartbeat: while it arrives the gateway's presence contributions are alive. */
export interface GatewayHeartbeat {
  readonly type: "gateway";
  readonly gateway: string;
  readonly leaseMs: number;
  readonly state: "up" | "down";
  /** Open sockets and distinct local viewers when it beat, for the status API (absent from older gateways). */
  readonly sockets?: number;
  readonly viewers?: number;
  /**
   * Its LIVECOUNT_NODE_ID and when this incarnation started (ms since the epoch): an owner hearing a
   * later incarnation lets the earlier one go at once, as on `down` (absent from older gateways).
   */
  readonly node?: string;
  readonly startedAt?: number;
}

/** Counter node heartbeat: membership of the ring. "leaving" hands partitions over before exit. */
export interface NodeHeartbeat {
  readonly type: "node";
  readonly node: string;
  /** A new id every process start: a node restarted under the same id has lost its presence state. */
  readonly incarnation: string;
  readonly leaseMs: number;
  readonly state: "up" | "leaving";
  /**
   * How often this incarnation's bus connection came back (absent: never). What a node published as
   * its connection dropped may be lost: a gateway hearing the count grow takes fresh snapshots of
   * the pages the node owns. Absent from older nodes, ignored by older gateways.
   */
  readonly reconnects?: number;
  /**
   * When the node's process started (ms since the epoch): the status API tells a node that started
   * from one found already running. Absent from older nodes.
   */
  readonly startedAt?: number;
}

/**
 * Counter node -> every DC: its data center is alive. `seq` grows by one per heartbeat of `node`, so
 * a gap tells a receiver that messages from that DC were lost (a cut link) even when the cut was
 * shorter than the DC lease.
 */
export interface DcHeartbeat {
  readonly type: "dc";
  readonly dc: string;
  readonly node: string;
  readonly seq: number;
  readonly leaseMs: number;
  /**
   * Epoch-ms: an operator asked to purge tombstones that changed before this (a PurgeRequest in the
   * sender's DC). Every counter node that hears it, in any DC, purges the partitions it serves up to
   * it. Absent when nobody asked since the sender started.
   */
  readonly purgeBefore?: number;
  /**
   * True: the sender acknowledges each keys message from another DC once it stored it (KeysAck), and
   * a DC whose nodes all say so is sent keys until they are acknowledged. Absent from older nodes,
   * which do not.
   */
  readonly acksKeys?: boolean;
}

/** The most partitions one summary may name (LIVECOUNT_PARTITIONS is at most this). */
export const MAX_PARTITIONS = 65536;

/**
 * The most sockets a gateway may say it holds of one viewer on a page: more than one process can
 * open (20,000 files here, LIVECOUNT_MAX_CONNECTIONS below that), so a larger count is a bug or a
 * lie, and `@connections` only ever grows from what gateways say.
 */
export const MAX_VIEWER_SOCKETS = 2 ** 20;
export type Broadcast =
  | PageUpdate
  | PageUpdates
  | GatewayHeartbeat
  | NodeHeartbeat
  | DcHeartbeat
  | AntiEntropyMessage
  | AppliedKeys
  | KeysAck;

/** Every message on the bus; `type` tells them apart. */
export type InternalMessage = NodeRequest | NodeReply | Broadcast;
