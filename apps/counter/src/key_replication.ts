/**
 * Idempotency keys across data centers. A publisher whose change got no answer retries it with the
 * same key, and the retry may land in another DC (its first DC failed, or a global name resolved to
 * another). Each DC keeps its own keys, so that retry would count again. Here a partition's owner
 * sends the keys of the changes it applied (after they are durable and published, with the answers
 * it gave) on `lc.keys.<partition>`, and the partition's owner in every other DC stores them beside
 * its own, keeping its own where both hold a key. A retry that arrives after the keys is answered
 * as the change it repeats, whichever DC it reaches.
 *
 * What it cannot do: a retry that reaches another DC before the keys (sent within the commit's round
 * trip, at the link's latency; a cut link sends nothing) counts again, and keys are not carried by
 * anti-entropy, so a DC that was cut off or rebuilt has not got them. Sent only while another DC
 * is heard.
 */
import { partitionKeysSubject, type Bus } from "@livecount/bus";
import { MAX_APPLIED_KEYS, decodeMessage, encodeMessage, type AppliedKeys } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { LogThrottle, type Logger } from "@livecount/runtime";
import type { Fence, KeyRestore, Store } from "@livecount/store";
import type { CounterMetrics } from "./counter_metrics.js";
import { PartitionSubscriptions } from "./partition_subscriptions.js";

export interface KeyReplicationOptions {
  readonly dc: string;
  readonly bus: Bus;
  readonly store: Store;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  readonly partitions: number;
  readonly fenceOf: (partition: number) => Fence | undefined;
  /** LIVECOUNT_IDEMPOTENCY_TTL_S: how long a stored key is kept. */
  readonly keyTtlMs: number;
  /** LIVECOUNT_IDEMPOTENCY_ACROSS_DCS. */
  readonly enabled: boolean;
  /** Whether some other data center is heard now (DcLiveness). */
  readonly othersLive: () => boolean;
}

export class KeyReplication {
  readonly #o: KeyReplicationOptions;
  readonly #logs = new LogThrottle();
  /** Per held partition, the subscription that brings other DCs' keys of its pages. */
  readonly #subs: PartitionSubscriptions;

  constructor(options: KeyReplicationOptions) {
    this.#o = options;
    this.#subs = new PartitionSubscriptions(options.bus, partitionKeysSubject, (partition, data) => {
      void this.#received(partition, data);
    });
  }

  /** Whether keys are sent now: the caller builds the records only then. */
  get sending(): boolean {
    return this.#o.enabled && this.#o.othersLive();
  }

  /** Sends the keys of changes applied to pages of each partition, MAX_APPLIED_KEYS a message. */
  send(byPartition: ReadonlyMap<number, readonly KeyRestore[]>): void {
    const { bus, dc, metrics } = this.#o;
    for (const [partition, keys] of byPartition) {
      for (let from = 0; from < keys.length; from += MAX_APPLIED_KEYS) {
        const chunk = keys.slice(from, from + MAX_APPLIED_KEYS);
        const msg: AppliedKeys = { type: "keys", dc, partition, keys: chunk };
        bus.publish(partitionKeysSubject(partition), encodeMessage(msg));
        metrics.keysAcrossDcs.inc({ outcome: "sent" }, chunk.length);
      }
    }
  }

  partitionHeld(partition: number): void {
    if (this.#o.enabled) this.#subs.held(partition);
  }

  partitionDropped(partition: number): void {
    this.#subs.dropped(partition);
  }

  stop(): void {
    this.#subs.stop();
  }

  async #received(partition: number, data: Uint8Array): Promise<void> {
    const { dc, store, fenceOf, keyTtlMs, metrics, logger, partitions } = this.#o;
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (err) {
      this.#logs.log(
        logger,
        "warn",
        { err, partition },
        "malformed idempotency keys from another DC dropped",
      );
      return;
    }
    if (msg.type !== "keys" || msg.dc === dc || msg.partition !== partition) return;
    // The store writes a partition's keys under its fence: pages of another partition are a bug.
    const keys = msg.keys.filter((k) => partitionOf(k.page, partitions) === partition);
    const fence = fenceOf(partition);
    let outcome: "stored" | "not_held" | "failed" = "not_held";
    try {
      if (fence !== undefined && (await store.restoreKeys(fence, keys, keyTtlMs, true))) outcome = "stored";
    } catch (err) {
      outcome = "failed";
      this.#logs.log(
        logger,
        "warn",
        { err, partition, from: msg.dc },
        "idempotency keys of another DC not stored",
      );
    }
    metrics.keysAcrossDcs.inc({ outcome }, keys.length);
  }
}
