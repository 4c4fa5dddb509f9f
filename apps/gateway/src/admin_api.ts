/**
 * The operators' status API (admin key), what the console at /admin shows:
 *
 * - `GET /v1/admin/status`: this DC's counter nodes (each asked for its own state over the bus:
 *   partitions held with their epochs, actors, pages waiting for a flush, bootstrap), its gateways
 *   (from their heartbeats: sockets, viewers, when last heard), every DC heard (live or down, lag)
 *   and the ring.
 * - `GET /v1/admin/pages/{page}`: every counter of a page with each DC's raw `{p, n}`, deleted
 *   counters and their tombstones included, and viewers per DC.
 * - `POST /v1/admin/purge`: every counter node of this DC purges the tombstones older than the age
 *   given in the partitions it serves, and asks every DC for the same in its heartbeats
 *   (tombstone_purge.ts in the counter app).
 *
 * A node that does not answer in time is listed with its error instead of failing the whole status:
 * a status page is most needed when something is down.
 */
import type { Bus, Subscription } from "@livecount/bus";
import { listenToGateways, type DcLiveness, type Membership } from "@livecount/cluster";
import type { Entry } from "@livecount/crdt";
import {
  ProtocolError,
  VIEWERS_COUNTER,
  isInternalCounter,
  tombstoneOf,
  type NodeStatusRequest,
  type PurgeRequest,
  type PurgedReply,
  type ReplyTo,
} from "@livecount/protocol";
import type { Clock, Logger } from "@livecount/runtime";
import { ClusterEvents, type ClusterEvent } from "./cluster_events.js";
import type { OwnerClient } from "./owner_client.js";
import { copyEntries, totalsOf } from "./page_reading.js";

export interface AdminApiOptions {
  readonly bus: Bus;
  readonly dc: string;
  readonly membership: Membership;
  readonly liveness: DcLiveness;
  readonly owners: OwnerClient;
  readonly clock: Clock;
  readonly logger: Logger;
  /** How long a counter node may take to answer for itself. */
  readonly timeoutMs: number;
  /**
   * How long it takes to hear every counter node already there (their lease): peers of older
   * releases, which do not say when they started, heard meanwhile were found, not joined.
   */
  readonly settleMs: number;
  /** This gateway, as its heartbeat would report it. */
  readonly self: () => GatewayStatus;
}

export interface GatewayStatus {
  readonly id: string;
  readonly sockets: number;
  readonly viewers: number;
  /** Epoch-ms. */
  readonly last_heard: number;
}

export interface NodeStatus {
  readonly id: string;
  readonly incarnation?: string;
  readonly ready?: boolean;
  readonly partitions?: ReadonlyArray<{ readonly partition: number; readonly epoch: number }>;
  readonly actors?: number;
  readonly dirty?: number;
  /** How long the oldest change not yet durable has waited, in ms. */
  readonly flush_lag_ms?: number;
  readonly bootstrapped?: number;
  /** Per remote DC, partitions with a resync (anti-entropy transfer) under way. */
  readonly resyncing?: Readonly<Record<string, number>>;
  /** Set instead of the rest when the node did not answer. */
  readonly error?: string;
}

export interface DcStatus {
  readonly dc: string;
  readonly local: boolean;
  readonly live: boolean;
  /** How long ago it was last heard (0 for this DC). */
  readonly lag_ms: number;
  /** Epoch-ms. */
  readonly last_heard: number;
}

export interface StatusBody {
  readonly dc: string;
  readonly ts: number;
  /** The gateway that answered. */
  readonly gateway: string;
  readonly nodes: NodeStatus[];
  readonly gateways: GatewayStatus[];
  readonly dcs: DcStatus[];
  readonly ring: {
    readonly partitions: number;
    readonly nodes: string[];
    /** Partitions the ring gives each node. */
    readonly assigned: Record<string, number>;
  };
  /** What changed in this DC since this gateway started, newest first (cluster_events.ts). */
  readonly events: ClusterEvent[];
}

/** A counter of a page as the console shows it: summed value, every DC's entry, deletion. */
export interface AdminCounter {
  readonly name: string;
  readonly value: number;
  /** Hidden from readers by a delete no later change has outdone. */
  readonly deleted: boolean;
  readonly entries: Record<string, Entry>;
  /** Each DC's entry of the counter's tombstone (`@del:<name>`); empty when it was never deleted. */
  readonly tombstone: Record<string, Entry>;
}

export interface AdminPageBody {
  readonly page: string;
  /** Viewers now (live DCs). */
  readonly viewers: number;
  /** Of those, viewers with the page in front of them, and open sockets joined to it (live DCs). */
  readonly active: number;
  readonly connections: number;
  /** Each DC's presence entry, and whether that DC counts now. */
  readonly viewers_by_dc: Record<string, Entry & { readonly live: boolean }>;
  readonly counters: AdminCounter[];
  readonly updated_at: number;
}

/** What one counter node purged, or why it did not say. */
/** What one counter node purged (its PurgedReply), or why it did not say. */
type PurgeCounts = Omit<PurgedReply, "type" | "node">;

export interface NodePurge extends Partial<PurgeCounts> {
  readonly id: string;
  /** Set instead of the rest when the node did not answer (it may still be purging). */
  readonly error?: string;
}

/**
 * POST /v1/admin/purge's answer: the counts summed over the nodes that answered, and `before`, the
 * cutoff they purged up to.
 */
export interface PurgeBody extends PurgeCounts {
  readonly dc: string;
  readonly older_than_s: number;
  readonly nodes: NodePurge[];
}

/**
 * How long a counter node may take to purge its partitions and answer: a purge reads every page with
 * a tombstone old enough, 200 per store call. A node that takes longer goes on and is listed with
 * "timeout".
 */
const PURGE_TIMEOUT_MS = 30_000;

export class AdminApi {
  readonly #o: AdminApiOptions;
  /**
   * Other gateways of this DC, by incarnation, from their heartbeats: with their lease and when
   * (monotonic) they were last heard.
   */
  readonly #gateways = new Map<string, GatewayStatus & { leaseMs: number; heardAt: number }>();
  #events: ClusterEvents | undefined;
  #sub: Subscription | undefined;
  #stopWatchingRing: (() => void) | undefined;

  constructor(options: AdminApiOptions) {
    this.#o = options;
  }

  start(): void {
    const { clock, membership } = this.#o;
    const events = (this.#events = new ClusterEvents(clock.now(), this.#o.settleMs));
    this.#stopWatchingRing = membership.onChange((ring, previous, restarted) =>
      events.ringChanged(clock.now(), ring, previous, restarted, membership),
    );
    this.#sub = listenToGateways(this.#o.bus, this.#o.dc, this.#o.logger, (beat) => {
      // This gateway is listed by itself (`self`), heard or not.
      if (beat.gateway === this.#o.self().id) return;
      const now = clock.now();
      if (beat.state === "down") {
        if (this.#gateways.delete(beat.gateway)) events.departed(now, "gateway", beat.gateway, "left");
        return;
      }
      if (!this.#gateways.has(beat.gateway)) events.arrived(now, "gateway", beat.gateway, beat.startedAt);
      this.#gateways.set(beat.gateway, {
        id: beat.gateway,
        sockets: beat.sockets ?? 0,
        viewers: beat.viewers ?? 0,
        last_heard: now,
        leaseMs: beat.leaseMs,
        heardAt: clock.monotonic(),
      });
      // A gateway killed without saying down (each restart is a new incarnation) is forgotten here
      // too, not only when someone asks for the status.
      this.#forgetSilent(now);
    });
  }

  stop(): void {
    this.#sub?.unsubscribe();
    this.#sub = undefined;
    this.#stopWatchingRing?.();
    this.#stopWatchingRing = undefined;
  }

  async status(): Promise<StatusBody> {
    const { membership, liveness, clock, dc } = this.#o;
    const now = clock.now();
    const ring = membership.ring;
    const nodes = await Promise.all(ring.nodes.map((node) => this.#nodeStatus(node)));
    const self = this.#o.self();
    this.#forgetSilent(now);
    const others = [...this.#gateways.values()].map(({ leaseMs: _, heardAt: __, ...g }) => g);
    const dcs: DcStatus[] = [
      { dc, local: true, live: true, lag_ms: 0, last_heard: now },
      ...liveness.remotes().map((r) => ({
        dc: r.dc,
        local: false,
        live: r.live,
        lag_ms: Math.max(0, now - r.lastHeard),
        last_heard: r.lastHeard,
      })),
    ];
    return {
      dc,
      ts: now,
      gateway: self.id,
      nodes,
      gateways: [self, ...others].sort((a, b) => (a.id < b.id ? -1 : 1)),
      dcs,
      ring: {
        partitions: ring.partitionCount,
        nodes: [...ring.nodes],
        assigned: Object.fromEntries(ring.nodes.map((n) => [n, ring.partitionsOf(n).length])),
      },
      events: this.#events?.recent(now) ?? [],
    };
  }

  /** Forgets gateways silent for their lease (by the monotonic clock; `now` is the wall clock's, for events). */
  #forgetSilent(now: number): void {
    const monotonic = this.#o.clock.monotonic();
    for (const [id, g] of this.#gateways) {
      if (monotonic - g.heardAt <= g.leaseMs) continue;
      this.#gateways.delete(id);
      this.#events?.departed(now, "gateway", id, "silent");
    }
  }

  async page(page: string): Promise<AdminPageBody> {
    const { liveness } = this.#o;
    const state = await this.#o.owners.forPage(page, { type: "snapshot", page });
    const totals = totalsOf(state.counters, liveness);
    const presence = Object.hasOwn(state.counters, VIEWERS_COUNTER) ? state.counters[VIEWERS_COUNTER]! : {};
    const counters: AdminCounter[] = [];
    for (const [name, entries] of Object.entries(state.counters)) {
      if (isInternalCounter(name)) continue;
      const tomb = state.counters[tombstoneOf(name)];
      // totalsOf shows the visible counters with their values: the others are deleted.
      const shown = Object.hasOwn(totals.counters, name);
      counters.push({
        name,
        value: shown ? totals.counters[name]! : 0,
        deleted: !shown,
        entries: copyEntries(Object.entries(entries)),
        tombstone: tomb !== undefined ? copyEntries(Object.entries(tomb)) : {},
      });
    }
    counters.sort((a, b) => (a.name < b.name ? -1 : 1));
    return {
      page,
      viewers: totals.viewers,
      active: totals.active,
      connections: totals.connections,
      viewers_by_dc: Object.fromEntries(
        Object.entries(presence).map(([dc, e]) => [dc, { p: e.p, n: e.n, live: liveness.isLive(dc) }]),
      ),
      counters,
      updated_at: state.ts,
    };
  }

  async purge(olderThanS: number): Promise<PurgeBody> {
    const { membership, clock, dc } = this.#o;
    const request: PurgeRequest = { type: "purge", olderThanMs: olderThanS * 1000 };
    const nodes = await Promise.all(
      membership.ring.nodes.map(async (node): Promise<NodePurge> => {
        const reply = await this.#ask(node, request, PURGE_TIMEOUT_MS);
        if ("error" in reply) return reply;
        const { pages, counters, kept, failed, waiting, before } = reply;
        return { id: node, pages, counters, kept, failed, waiting, before };
      }),
    );
    const replied = nodes.filter((n) => n.error === undefined);
    const befores = nodes.flatMap((n) => (n.before !== undefined ? [n.before] : []));
    const sum = (f: (n: NodePurge) => number | undefined): number =>
      replied.reduce((a, n) => a + (f(n) ?? 0), 0);
    return {
      dc,
      older_than_s: olderThanS,
      // The cutoff the nodes used (an earlier, later one stands); this gateway's clock if none answered.
      before: befores.length > 0 ? Math.max(...befores) : clock.now() - olderThanS * 1000,
      pages: sum((n) => n.pages),
      counters: sum((n) => n.counters),
      kept: sum((n) => n.kept),
      failed: sum((n) => n.failed),
      waiting: sum((n) => n.waiting),
      nodes,
    };
  }

  /** Asks one counter node of this DC; a node that fails is `{id, error}` with a stable code. */
  async #ask<T extends NodeStatusRequest | PurgeRequest>(
    node: string,
    request: T,
    timeoutMs: number,
  ): Promise<ReplyTo<T> | { id: string; error: string }> {
    try {
      return await this.#o.owners.toNode(node, request, timeoutMs);
    } catch (err) {
      // The node's own error code, "timeout" when it did not answer in time, "unavailable" otherwise.
      return { id: node, error: err instanceof ProtocolError ? err.code : "unavailable" };
    }
  }

  async #nodeStatus(node: string): Promise<NodeStatus> {
    const info = await this.#ask(node, { type: "node_status" }, this.#o.timeoutMs);
    if ("error" in info) return info;
    return {
      id: info.node,
      incarnation: info.incarnation,
      ready: info.ready,
      partitions: info.partitions.map(([partition, epoch]) => ({ partition, epoch })),
      actors: info.actors,
      dirty: info.dirty,
      flush_lag_ms: info.flushLagMs,
      bootstrapped: info.bootstrapped,
      resyncing: info.resyncing,
    };
  }
}
