import type { PageActor } from "./page_actor.js";

/**
 * The page actors whose entries wait for a flush, by partition, partitions in the order they became
 * dirty, and since when the oldest change among them waits: what the durable writer flushes next,
 * and its lag. A partition's pages go to the store in one script, so a flush takes whole partitions:
 * split over two flushes, a partition would pay its script's fixed work (the fence, the page and
 * bucket indexes, the digests) twice.
 */
export class DirtyPages {
  readonly #byPartition = new Map<number, Set<PageActor>>();
  #size = 0;
  /** When the oldest change not yet taken by a flush was made; undefined when there is none. */
  #since: number | undefined;

  /** The actor has entries to persist and publish, changed at `since`. */
  add(actor: PageActor, since: number): void {
    this.#since = Math.min(since, this.#since ?? since);
    const actors = this.#byPartition.get(actor.partition);
    if (actors === undefined) this.#byPartition.set(actor.partition, new Set([actor]));
    else if (!actors.has(actor)) actors.add(actor);
    else return;
    this.#size++;
  }

  /** The actor left memory. */
  delete(actor: PageActor): void {
    const actors = this.#byPartition.get(actor.partition);
    if (actors?.delete(actor) !== true) return;
    this.#size--;
    if (actors.size === 0) this.#byPartition.delete(actor.partition);
  }

  get size(): number {
    return this.#size;
  }

  /** When the oldest change not yet taken by a flush was made; undefined when none waits. */
  get since(): number | undefined {
    return this.#since;
  }

  /** Entries the dirty pages wait to write, registers included: a walk over them (draining, not flushing). */
  get entries(): number {
    let n = 0;
    for (const actors of this.#byPartition.values()) for (const actor of actors) n += actor.unwrittenCount;
    return n;
  }

  /**
   * Takes whole partitions, the longest dirty first, until their entries other than unique-visitor
   * registers reach `maxWrites` (the partition that reaches it goes whole): the registers fill what
   * is left of the bound (durable_writer.ts). Partitions that cannot be written now (`writable`
   * false: the lease's renewal is late) are passed over, in their place. The rest stay, and `since`
   * stays the oldest change before this take: the lag keeps counting from it.
   */
  take(maxWrites: number, writable: (partition: number) => boolean = () => true): PageActor[] {
    const taken: PageActor[] = [];
    let writes = 0;
    for (const [partition, actors] of this.#byPartition) {
      if (writes >= maxWrites) break;
      if (!writable(partition)) continue;
      for (const actor of actors) {
        taken.push(actor);
        writes += actor.unwrittenCount - actor.registersWaiting;
      }
      this.#byPartition.delete(partition);
      this.#size -= actors.size;
    }
    if (this.#size === 0) this.#since = undefined;
    return taken;
  }
}
