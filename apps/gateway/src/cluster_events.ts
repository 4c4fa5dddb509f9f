/**
 * What changed in this DC lately, as this gateway saw it, for the status API and the console's
 * cluster view: counter nodes joining, restarting and leaving the ring, gateways coming and going.
 * A node that dies leaves the ring, and the status with it; this keeps the fact that it was there,
 * and when it went. Each gateway keeps its own, from its start: nothing is stored.
 */
import type { HashRing } from "@livecount/ring";

export type ClusterEventKind = "node" | "gateway";
/**
 * - `joined`: a node came on the ring, or a gateway was first heard, that started after this gateway
 *   did (one already running when it started was found, not joined);
 * - `restarted`: a node on the ring under a new incarnation (restarted, or back from a cut);
 * - `left`: a node or gateway that said it was going (a node's stop hands its partitions over);
 * - `silent`: a node or gateway not heard for its lease (killed, frozen or cut off);
 * - `back`: a node or gateway heard again after it left or went silent, the same process.
 */
export type ClusterEventName = "joined" | "restarted" | "left" | "silent" | "back";

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
/** Departures remembered to tell a return from a start: gateways leave under a new id every restart. */
const MAX_GONE = 1_000;

/** What the ring's membership knows of its nodes (Membership). */
export interface RingPeers {
  startedAt(node: string): number | undefined;
  departure(node: string): "left" | "silent" | undefined;
}

export class ClusterEvents {
  /** Oldest first. */
  readonly #events: ClusterEvent[] = [];
  /** "kind:id" of what left or went silent -> when, oldest first. */
  readonly #gone = new Map<string, number>();
  readonly #startedAt: number;
  readonly #settledAt: number;

  /**
   * @param startedAt when this gateway started (epoch-ms)
   * @param settleMs how long it takes to hear everyone already there: for peers of releases that do
   *   not say when they started, who is heard meanwhile was found, not joined.
   */
  constructor(startedAt: number, settleMs: number) {
    this.#startedAt = startedAt;
    this.#settledAt = startedAt + settleMs;
  }

  /** A node or gateway heard that was not known (`startedAt`: when its process started, if it says). */
  arrived(at: number, kind: ClusterEventKind, id: string, startedAt: number | undefined): void {
    const key = `${kind}:${id}`;
    const goneAt = this.#gone.get(key);
    if (goneAt !== undefined) {
      this.#gone.delete(key);
      // A process started since it went is a new one under the same id.
      this.#note(at, kind, id, startedAt !== undefined && startedAt > goneAt ? "joined" : "back");
      return;
    }
    if (startedAt !== undefined ? startedAt <= this.#startedAt : at < this.#settledAt) return;
    this.#note(at, kind, id, "joined");
  }

  departed(at: number, kind: ClusterEventKind, id: string, event: "left" | "silent"): void {
    const key = `${kind}:${id}`;
    this.#gone.delete(key);
    this.#gone.set(key, at);
    if (this.#gone.size > MAX_GONE) this.#gone.delete(this.#gone.keys().next().value!);
    this.#note(at, kind, id, event);
  }

  /** The counter nodes that joined, restarted and left between two rings. */
  ringChanged(
    at: number,
    ring: HashRing,
    previous: HashRing,
    restarted: ReadonlySet<string>,
    peers: RingPeers,
  ): void {
    const before = new Set(previous.nodes);
    const now = new Set(ring.nodes);
    for (const node of previous.nodes)
      if (!now.has(node)) this.departed(at, "node", node, peers.departure(node) ?? "left");
    for (const node of ring.nodes) {
      if (!before.has(node)) this.arrived(at, "node", node, peers.startedAt(node));
      else if (restarted.has(node)) this.#note(at, "node", node, "restarted");
    }
  }

  /** Newest first, those of the last hour. */
  recent(now: number): ClusterEvent[] {
    while (this.#events.length > 0 && now - this.#events[0]!.at > CLUSTER_EVENT_TTL_MS) this.#events.shift();
    return this.#events.slice().reverse();
  }

  #note(at: number, kind: ClusterEventKind, id: string, event: ClusterEventName): void {
    this.#events.push({ at, kind, id, event });
    if (this.#events.length > MAX_CLUSTER_EVENTS) this.#events.shift();
  }
}
