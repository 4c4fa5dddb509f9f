/**
 * What changed in this DC lately, as this gateway saw it, for the status API and the console's
 * cluster view: counter nodes joining, restarting and leaving the ring, gateways coming and going.
 * A node that dies leaves the ring, and the status with it; this keeps the fact that it was there,
 * and when it went. Each gateway keeps its own, from its start: nothing is stored.
 */
import type { HashRing } from "@livecount/ring";

export type ClusterEventKind = "node" | "gateway";
/**
 * `joined` (a node on the ring, a gateway first heard), `restarted` (a node back on the ring under a
 * new incarnation), `left` (a node off the ring; a gateway that said it was going), `silent` (a
 * gateway not heard for its lease: killed, or cut off).
 */
export type ClusterEventName = "joined" | "restarted" | "left" | "silent";

export interface ClusterEvent {
  /** Epoch-ms. */
  readonly at: number;
  readonly kind: ClusterEventKind;
  readonly id: string;
  readonly event: ClusterEventName;
}

/** At most this many are kept: enough for an incident's story, not a flapping node's hour. */
export const MAX_CLUSTER_EVENTS = 50;
/** And none older than this. */
export const CLUSTER_EVENT_TTL_MS = 3_600_000;

export class ClusterEvents {
  /** Oldest first. */
  readonly #events: ClusterEvent[] = [];
  readonly #settledAt: number;

  /**
   * @param startedAt when this gateway started (epoch-ms)
   * @param settleMs how long it takes to hear everyone already there: who it finds meanwhile did
   *   not join, it was found.
   */
  constructor(startedAt: number, settleMs: number) {
    this.#settledAt = startedAt + settleMs;
  }

  note(at: number, kind: ClusterEventKind, id: string, event: ClusterEventName): void {
    if (event === "joined" && at < this.#settledAt) return;
    this.#events.push({ at, kind, id, event });
    if (this.#events.length > MAX_CLUSTER_EVENTS) this.#events.shift();
  }

  /** The counter nodes that joined, restarted and left between two rings. */
  ringChanged(at: number, ring: HashRing, previous: HashRing, restarted: ReadonlySet<string>): void {
    const before = new Set(previous.nodes);
    const now = new Set(ring.nodes);
    for (const node of previous.nodes) if (!now.has(node)) this.note(at, "node", node, "left");
    for (const node of ring.nodes) {
      if (!before.has(node)) this.note(at, "node", node, "joined");
      else if (restarted.has(node)) this.note(at, "node", node, "restarted");
    }
  }

  /** Newest first, those of the last hour. */
  recent(now: number): ClusterEvent[] {
    while (this.#events.length > 0 && now - this.#events[0]!.at > CLUSTER_EVENT_TTL_MS) this.#events.shift();
    return this.#events.slice().reverse();
  }
}
