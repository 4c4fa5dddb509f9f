/**
 * Messages between gateways and counter nodes on the bus (msgpack). These are internal: they may
 * change between releases, unlike the public frames in frames.ts.
 */
import type { Entries, Entry } from "@livecount/crdt";
import type { ErrorCode } from "./errors.js";

/** One viewer's presence on one page at one gateway. Set semantics: applying it twice is harmless. */
export interface PresenceOp {
  readonly page: string;
  /** Namespaced viewer key: "v:<client viewer id>" or "s:<gateway incarnation>:<socket seq>". */
  readonly viewer: string;
  readonly present: boolean;
}

/** Gateway -> owner: viewer transitions on pages of one partition, in order, one batch in flight. */
export interface PresenceBatch {
  readonly type: "presence";
  /** Gateway incarnation: a new id every process start, so a restarted gateway is a new contributor. */
  readonly gateway: string;
  readonly partition: number;
  readonly ops: readonly PresenceOp[];
}

/**
 * Gateway -> owner: the gateway's whole contribution to one partition, replacing whatever the owner
 * held for it. Sent when a partition gets a new owner and after a bus reconnect.
 */
export interface PresenceSync {
  readonly type: "presence_sync";
  readonly gateway: string;
  readonly partition: number;
  readonly pages: Readonly<Record<string, readonly string[]>>;
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

/** How many times a request was forwarded between nodes that disagree about the owner (absent: 0). */
export interface Forwardable {
  readonly hop?: number;
}

export type NodeRequest = (PresenceBatch | PresenceSync | SnapshotRequest | IncrementRequest) & Forwardable;

export interface AckReply {
  readonly type: "ack";
}

/** A page's state: every data center's entry of every counter; presence under VIEWERS_COUNTER. */
export interface PageStateReply {
  readonly type: "page_state";
  readonly page: string;
  readonly counters: Readonly<Record<string, Entries>>;
  /** Data centers whose presence entries count towards `viewers` right now (not past their lease). */
  readonly liveDcs: readonly string[];
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

export interface ErrorReply {
  readonly type: "error";
  readonly code: ErrorCode;
  readonly message: string;
}

export type NodeReply = AckReply | PageStateReply | IncrementReply | ErrorReply;

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

/** Gateway heartbeat: while it arrives the gateway's presence contributions are alive. */
export interface GatewayHeartbeat {
  readonly type: "gateway";
  readonly gateway: string;
  readonly leaseMs: number;
  readonly state: "up" | "down";
}

/** Counter node heartbeat: membership of the ring. "leaving" hands partitions over before exit. */
export interface NodeHeartbeat {
  readonly type: "node";
  readonly node: string;
  /** A new id every process start: a node restarted under the same id has lost its presence state. */
  readonly incarnation: string;
  readonly leaseMs: number;
  readonly state: "up" | "leaving";
}

export type Broadcast = PageUpdate | GatewayHeartbeat | NodeHeartbeat;

/** Every message on the bus; `type` tells them apart. */
export type InternalMessage = NodeRequest | NodeReply | Broadcast;
