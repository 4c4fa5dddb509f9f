import { pageFromSubject, partitionPagesSubject, type Bus, type Subscription } from "@livecount/bus";
import { VIEWERS_COUNTER, decodeMessage } from "@livecount/protocol";
import { LogThrottle, type Logger } from "@livecount/runtime";
import type { Fence } from "@livecount/store";
import type { CounterMetrics } from "./counter_metrics.js";
import type { ActorRegistry } from "./actor_registry.js";
import type { DurableWriter } from "./durable_writer.js";
import { ActorClosedError } from "./page_actor.js";

export interface ReplicationOptions {
  readonly dc: string;
  readonly bus: Bus;
  readonly logger: Logger;
  readonly registry: ActorRegistry;
  readonly metrics: CounterMetrics;
  readonly writer: DurableWriter;
  /**
   * The lease the partition's other-DC entries are merged under (PartitionOwnership.leaseOf): also
   * while it has run out here, as when a stall or a late answer of the store outlasted it. The
   * store refuses the merge if another node took the partition; if nobody did, the next renewal
   * keeps it, and what came meanwhile must not be lost.
   */
  readonly leaseOf: (partition: number) => Fence | undefined;
}

/**
 * Other DCs' entries as they change, in real time: for each partition it holds, a node subscribes
 * to the partition's page subjects and merges every other DC's update into the page's actor, which
 * persists it (a read here shows the global value, also after a restart). What this stream misses
 * (a cut link, a partition nobody here held for a while) comes back through `AntiEntropy`. Pages not
 * in memory are written straight to the store: another DC's traffic brings no page into memory here.
 */
export class Replication {
  readonly #o: ReplicationOptions;
  /** Lines that can repeat per request or message, throttled (LogThrottle). */
  readonly #logs = new LogThrottle();
  /** Per held partition, the subscription that brings other DCs' entries of its pages. */
  readonly #subs = new Map<number, Subscription>();

  constructor(options: ReplicationOptions) {
    this.#o = options;
  }

  partitionHeld(partition: number): void {
    if (this.#subs.has(partition)) return;
    const sub = this.#o.bus.subscribe(partitionPagesSubject(partition), (data, subject) =>
      this.#onRemoteUpdate(partition, data, subject),
    );
    this.#subs.set(partition, sub);
  }

  partitionDropped(partition: number): void {
    this.#subs.get(partition)?.unsubscribe();
    this.#subs.delete(partition);
  }

  stop(): void {
    for (const sub of this.#subs.values()) sub.unsubscribe();
    this.#subs.clear();
  }

  /** Another DC's owner published its entries of a page held here: merge and persist them. */
  #onRemoteUpdate(partition: number, data: Uint8Array, subject: string): void {
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (err) {
      this.#logs.log(this.#o.logger, "warn", { err, subject }, "malformed page update");
      return;
    }
    if (msg.type !== "update" || msg.dc === this.#o.dc || pageFromSubject(subject) !== msg.page) return;
    const fence = this.#o.leaseOf(partition);
    if (fence === undefined) return;
    const { page, dc, counters } = msg;
    this.#o.metrics.replicationLag.set({ dc }, Math.max(0, this.#o.registry.now() - msg.ts) / 1000);
    const { registry } = this.#o;
    // With occupancy webhooks, the owner announces every page's total: presence from another DC
    // loads the page, which sees the change against what the store held.
    const watched = registry.watchesOccupancy && Object.hasOwn(counters, VIEWERS_COUNTER);
    if (registry.find(page) === undefined && !watched) {
      // Not in memory: straight into the store, no actor (remote traffic costs this node no state).
      const writes = Object.entries(counters).map(([counter, entry]) => ({ page, counter, dc, entry }));
      registry.holdLoads(partition, this.#o.writer.writeRemote(fence, writes));
      return;
    }
    registry
      .run(page, partition, (actor) => actor.mergeRemote(dc, counters))
      .catch((err: unknown) => {
        // An actor closed meanwhile (the partition was lost): anti-entropy brings it to the next holder.
        if (!(err instanceof ActorClosedError))
          this.#logs.log(this.#o.logger, "error", { err, page }, "remote update failed");
      });
  }
}
