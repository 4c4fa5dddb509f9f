import type { Entry } from "@livecount/crdt";
import type { EntryWrite, Fence, FencedWrites } from "@livecount/store";
import type { DirtyPages } from "./dirty_pages.js";
import type { PageActor } from "./page_actor.js";

/** A page a flush took entries from. */
export interface TakenPage {
  readonly actor: PageActor;
  readonly writes: EntryWrite[];
  /** Entries to publish per DC, as of this write: exactly what is durable once it succeeds. */
  readonly updates: Map<string, Map<string, Entry>>;
}

/** What one flush writes (one script per partition) and the pages it took it from. */
export interface FlushBatch {
  readonly groups: Map<number, FencedWrites & { writes: EntryWrite[] }>;
  readonly taken: TakenPage[];
}

/**
 * Takes one flush's entries from the dirty pages, about `maxWrites` of them (whole partitions).
 *
 * Unique-visitor registers come last: while every new visitor raises one, they outnumber every
 * other entry (nine in ten of a presence load's writes), and a store that cannot keep up would hold
 * the viewers behind them, and their publish (invariant 3), for as long as the backlog lasts. So a
 * flush takes every other entry of its pages first, and registers with what is left of its bound;
 * the rest wait, in memory, for the flushes after (one entry per register, page and day: 4,096 a
 * page and day at most, per DC). `requeue` gets each page left with registers: it stays dirty.
 */
export function takeFlushBatch(
  dirty: DirtyPages,
  maxWrites: number,
  fenceOf: (partition: number) => Fence | undefined,
  requeue: (actor: PageActor) => void,
): FlushBatch {
  // The pages this flush writes (active; take() passes over partitions without a fence, in this
  // same turn): their entries other than registers count against the bound first.
  const writable: Array<{ actor: PageActor; fence: Fence }> = [];
  let registers = maxWrites;
  for (const actor of dirty.take(maxWrites, (partition) => fenceOf(partition) !== undefined)) {
    if (actor.status !== "active") continue;
    writable.push({ actor, fence: fenceOf(actor.partition)! });
    registers -= actor.unwrittenCount - actor.registersWaiting;
  }
  const groups = new Map<number, FencedWrites & { writes: EntryWrite[] }>();
  const taken: TakenPage[] = [];
  for (const { actor, fence } of writable) {
    const waiting = actor.registersWaiting;
    if (waiting > 0 && registers <= 0 && actor.unwrittenCount === waiting) {
      requeue(actor); // only registers, and none fit
      continue;
    }
    const writes = actor.takeUnwritten(Math.max(0, registers));
    registers -= waiting - actor.registersWaiting;
    if (actor.registersWaiting > 0) requeue(actor);
    // Taken together with the writes: a change made during the round trip is published by the
    // next flush, after its own write.
    taken.push({ actor, writes, updates: actor.takeUnpublished() });
    if (writes.length === 0) continue;
    let group = groups.get(actor.partition);
    if (group === undefined) groups.set(actor.partition, (group = { fence, writes: [] }));
    group.writes.push(...writes);
  }
  return { groups, taken };
}
