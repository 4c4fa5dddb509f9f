import type { Fence, PageRecord } from "@livecount/store";
import type { ActorRegistry } from "./actor_registry.js";
import type { CounterMetrics } from "./counter_metrics.js";
import type { DurableWriter } from "./durable_writer.js";
import { ActorClosedError } from "./page_actor.js";
import { countsOf } from "./page_chunks.js";

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
 * already and gets what advanced.
 */
export async function mergeReceivedPages(
  o: ReceivedPagesOptions,
  fence: Fence,
  pages: Readonly<Record<string, PageRecord>>,
): Promise<void> {
  const { partition } = fence;
  const written = o.writer.mergeIntoStore(fence, new Map(Object.entries(pages)));
  o.registry.holdLoads(partition, written);
  let advanced: Map<string, PageRecord>;
  try {
    advanced = await written;
  } catch (err) {
    // Applied or not, unknown (a timeout): resident actors take every entry, unconfirmed.
    await mergeResident(o.registry, partition, new Map(Object.entries(pages)), "unconfirmed");
    throw err;
  }
  await mergeResident(o.registry, partition, advanced, "stored");
  o.metrics.antiEntropyPages.inc({ direction: "received" }, Object.keys(pages).length);
  o.metrics.antiEntropyPages.inc({ direction: "changed" }, advanced.size);
}

/** Gives pages' entries to their actors in memory (PageActor.mergeDurable); pages not in memory load them. */
async function mergeResident(
  registry: ActorRegistry,
  partition: number,
  pages: ReadonlyMap<string, PageRecord>,
  store: "stored" | "unconfirmed",
): Promise<void> {
  const resident: Array<Promise<void>> = [];
  // Actors hold no time buckets: a page whose buckets alone advanced is nothing to them.
  for (const [page, record] of countsOf(pages)) {
    if (registry.find(page) === undefined) continue;
    resident.push(
      registry
        .run(page, partition, (actor) => actor.mergeDurable(record, store))
        .catch((err: unknown) => {
          // Closed meanwhile: it is in the store, where its next actor loads it from.
          if (!(err instanceof ActorClosedError)) throw err;
        }),
    );
  }
  await Promise.all(resident);
}
