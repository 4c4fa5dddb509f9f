import type { Fence, PageRecord } from "@livecount/store";
import type { ActorRegistry } from "./actor_registry.js";
import type { CounterMetrics } from "./counter_metrics.js";
import type { DurableWriter } from "./durable_writer.js";
import { ActorClosedError } from "./page_actor.js";
import { hasCounts } from "./page_chunks.js";

/** What merging another DC's pages needs (anti_entropy.ts). */
export interface ReceivedPagesOptions {
  readonly registry: ActorRegistry;
  readonly writer: DurableWriter;
  readonly metrics: CounterMetrics;
}

/**
 * Merges another DC's record of pages into the store first, in one round trip (what advanced is
 * published once durable), then into the actors of those pages in memory. Loads of the
 * partition's pages wait for the write, so an actor either loads what it wrote or is in memory
 * already and gets what advanced. False when the store refused the fence: nothing was merged.
 */
export async function mergeReceivedPages(
  o: ReceivedPagesOptions,
  fence: Fence,
  pages: Readonly<Record<string, PageRecord>>,
): Promise<boolean> {
  const { partition } = fence;
  const written = o.writer.mergeIntoStore(fence, new Map(Object.entries(pages)));
  o.registry.holdLoads(partition, written);
  let advanced: Map<string, PageRecord> | null;
  try {
    advanced = await written;
  } catch (err) {
    // Applied or not, unknown (a timeout): resident actors take every entry, unconfirmed.
    await mergeResident(o.registry, partition, new Map(Object.entries(pages)), "unconfirmed");
    throw err;
  }
  // Refused: another node took the partition.
  if (advanced === null) return false;
  await mergeResident(o.registry, partition, advanced, "stored");
  o.metrics.antiEntropyPages.inc({ direction: "received" }, Object.keys(pages).length);
  o.metrics.antiEntropyPages.inc({ direction: "changed" }, advanced.size);
  return true;
}

/**
 * Gives pages' entries to their actors in memory (PageActor.mergeDurable); pages not in memory load
 * them. An active actor merges at once, in this turn: a heal hands over hundreds of pages a
 * message, and a promise and a copy of each page's record were about a seventh of their merge
 * (docs/benchmarks.md, "Heal merges without a promise per page"). Only actors still loading are
 * waited for.
 */
async function mergeResident(
  registry: ActorRegistry,
  partition: number,
  pages: ReadonlyMap<string, PageRecord>,
  store: "stored" | "unconfirmed",
): Promise<void> {
  const loading: Array<Promise<void>> = [];
  let failure: { err: unknown } | undefined;
  for (const [page, record] of pages) {
    const actor = registry.find(page);
    // Actors hold no time buckets: a page whose buckets alone advanced is nothing to them.
    if (actor === undefined || !hasCounts(record)) continue;
    if (actor.status !== "active") {
      loading.push(
        registry
          .run(page, partition, (a) => a.mergeDurable(record, store))
          .catch((err: unknown) => {
            // Closed meanwhile: it is in the store, where its next actor loads it from.
            if (!(err instanceof ActorClosedError)) throw err;
          }),
      );
      continue;
    }
    try {
      // Active: it runs the work now, never with a failure.
      actor.run(() => actor.mergeDurable(record, store));
    } catch (err) {
      // Every other page is still merged, as when each ran on its own.
      failure ??= { err };
    }
  }
  await Promise.all(loading);
  if (failure !== undefined) throw failure.err;
}
