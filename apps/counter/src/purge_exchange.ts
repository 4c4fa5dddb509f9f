/**
 * What anti-entropy carries for the tombstone purge (docs/architecture.md, "Purging tombstones"):
 * it notes when another DC's tombstone digests equal this store's (a purge waits until every DC has
 * held a tombstone for the purge grace), and it raises a partition's purge floor to a peer's when
 * this DC learns the partition from it (a rebuilt DC's entries then restart above any purged one).
 */
import type { AeSummary } from "@livecount/protocol";
import type { Clock, Logger } from "@livecount/runtime";
import type { Fence, Store } from "@livecount/store";
import type { ActorRegistry } from "./actor_registry.js";
import type { DurableWriter } from "./durable_writer.js";

export interface PurgeExchangeOptions {
  readonly store: Store;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly registry: ActorRegistry;
  readonly writer: DurableWriter;
  readonly fenceOf: (partition: number) => Fence | undefined;
  /**
   * `remote` held every tombstone this DC's store held of `partition` as of `at` (their tombstone
   * digests were equal; `at` was taken before this store's was read).
   */
  readonly tombsAgreed: (partition: number, remote: string, at: number) => void;
}

export class PurgeExchange {
  readonly #o: PurgeExchangeOptions;

  constructor(options: PurgeExchangeOptions) {
    this.#o = options;
  }

  /** Notes the partitions held here (`held`) whose tombstone digests equal the sender's. */
  async compareTombs(msg: AeSummary, held: (partition: number) => boolean): Promise<void> {
    const { tombsAgreed } = this.#o;
    if (msg.tombs === undefined) return; // a sender of an earlier release
    const pairs = msg.digests.map(([p], i) => [p, msg.tombs![i]!] as const).filter(([p]) => held(p));
    // Taken before the read: what the store held by then is in the digests read.
    const at = this.#o.clock.now();
    let local: string[];
    try {
      local = await this.#o.store.tombDigests(pairs.map(([p]) => p));
    } catch {
      return; // the next summary compares again
    }
    pairs.forEach(([partition, theirs], i) => {
      if (local[i] === theirs) tombsAgreed(partition, msg.from, at);
    });
  }

  /**
   * Raises the partition's purge floor to a peer's, on the commit chain (no change is planned from
   * the lower one meanwhile). False when it could not: a bootstrap must not end then (it asks again).
   */
  async raiseFloor(partition: number, floor: number): Promise<boolean> {
    const fence = this.#o.fenceOf(partition);
    const { registry, store, writer, logger } = this.#o;
    if (fence === undefined) return false;
    if (floor <= registry.purgeFloor(partition)) return true;
    try {
      return await writer.serialized(async () => {
        if (!(await store.raisePurgeFloor(fence, floor))) return false;
        registry.purgeRaised(partition, floor);
        return true;
      });
    } catch (err) {
      logger.warn({ err, partition }, "purge floor not raised; the bootstrap asks again");
      return false;
    }
  }
}
