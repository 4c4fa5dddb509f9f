import { antiEntropyPartitionSubject } from "@livecount/bus";
import { encodeAeEntries } from "@livecount/protocol";
import type { PageRecord, Store } from "@livecount/store";
import type { CounterMetrics } from "./counter_metrics.js";
import { chunkPages } from "./page_chunks.js";

/** What sending a partition's pages to another DC takes (anti_entropy.ts). */
export interface PageSenderOptions {
  readonly dc: string;
  readonly store: Store;
  readonly metrics: CounterMetrics;
  /** This node's store holds the partition's state (AntiEntropyOptions.bootstrapped). */
  readonly bootstrapped: (partition: number) => boolean;
  /** Publishes one message on the bus, counting its bytes. */
  readonly publish: (subject: string, data: Uint8Array) => void;
  /** The most bytes a message may carry now (chunkPages: half the bus's max_payload, at most 512 KiB). */
  readonly maxBytes: number;
}

/** Buckets read from the store at once while sending (all of a partition: two store round trips). */
const BUCKETS_PER_READ = 64;

/**
 * Sends `to` every page of `buckets` of `partition` as the store holds it, in messages of bounded
 * size (page_chunks.ts), read a few buckets at a time so the pages in memory stay bounded too. The
 * last message ends the transfer (`done`) and carries this DC's purge floor (AeEntries.floor) and
 * whether this node still learned the partition when it began reading (AeBuckets.senderLearning).
 */
export async function sendPages(
  o: PageSenderOptions,
  to: string,
  partition: number,
  buckets: readonly number[],
): Promise<void> {
  const subject = antiEntropyPartitionSubject(to, partition);
  const head = { from: o.dc, to, partition };
  // Before the reads: pages read while this node still learns the partition teach nothing.
  const learningHere = !o.bootstrapped(partition);
  let batch: Array<[string, PageRecord]> = [];
  let sent = 0;
  for (let i = 0; i < buckets.length; i += BUCKETS_PER_READ) {
    const pages = await o.store.bucketPages(partition, buckets.slice(i, i + BUCKETS_PER_READ));
    // Every message but the last of a cut is full and goes now; the last waits for more pages.
    const chunks = [...chunkPages([...batch, ...pages], o.maxBytes)];
    batch = chunks.pop() ?? [];
    for (const chunk of chunks) {
      o.publish(subject, encodeAeEntries(head, chunk));
      sent += chunk.length;
    }
  }
  const floor = await o.store.purgeFloor(partition);
  o.publish(
    subject,
    encodeAeEntries(head, batch, {
      done: true,
      ...(floor > 0 ? { floor } : {}),
      ...(learningHere ? { senderLearning: true } : {}),
    }),
  );
  sent += batch.length;
  o.metrics.antiEntropy.inc({ step: "entries" });
  o.metrics.antiEntropyPages.inc({ direction: "sent" }, sent);
}
