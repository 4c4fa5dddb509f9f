import type { PageActor } from "./page_actor.js";

/**
 * The page actors whose entries wait for a flush, by partition, partitions in the order they became
 * dirty, and since when the oldest change among them waits: what the durable writer flushes next,
 * and its lag. A partition's pages go to the store in one script, so a flush takes whole partitions:
 * split over two flushes, a partition would pay its script's fixed work (the fence, the page and
 * bucket indexes, the digests) twice.
 *
 * Pages that only write their entries again (`add(..., true)`: after the store restarted, every
 * page in memory does) wait in a queue of their own, taken with what a flush has left once every
 * changed partition is in: 100,000 such pages fill twenty flushes, and a viewer's join must not wait
 * behind them to be counted. A change to a page of such a partition moves the whole partition to
 * the changes' queue.
 */
export class DirtyPages {
  readonly #byPartition = new Map<number, Set<PageActor>>();
  /** Partitions whose pages only write their entries again; none of them is in #byPartition. */
  readonly #rewrites = new Map<number, Set<PageActor>>();
  #size = 0;
  /** When the oldest change not yet taken by a flush was made; undefined when there is none. */
  #since: number | undefined;

  /**
   * The actor has entries to persist and publish, changed at `since`; `rewrite`: entries the store
   * has already, written again (they change nothing, and add nothing to the lag).
   */
  add(actor: PageActor, since: number, rewrite = false): void {
    const { partition } = actor;
    let actors = this.#byPartition.get(partition);
    if (actors === undefined) {
      const rewrites = this.#rewrites.get(partition);
      if (rewrite) {
        if (rewrites === undefined) this.#rewrites.set(partition, new Set([actor]));
        else if (!rewrites.has(actor)) rewrites.add(actor);
        else return;
        this.#size++;
        return;
      }
      // The first change of a partition that was only rewriting: all of it goes with the changes.
      this.#rewrites.delete(partition);
      this.#byPartition.set(partition, (actors = rewrites ?? new Set()));
    }
    if (!rewrite) this.#since = Math.min(since, this.#since ?? since);
    if (actors.has(actor)) return;
    actors.add(actor);
    this.#size++;
  }

  /** The actor left memory. */
  delete(actor: PageActor): void {
    for (const queue of [this.#byPartition, this.#rewrites]) {
      const actors = queue.get(actor.partition);
      if (actors?.delete(actor) !== true) continue;
      this.#size--;
      if (actors.size === 0) queue.delete(actor.partition);
    }
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
    for (const queue of [this.#byPartition, this.#rewrites])
      for (const actors of queue.values()) for (const actor of actors) n += actor.unwrittenCount;
    return n;
  }

  /**
   * Takes whole partitions, the longest dirty first and those only rewriting after them, until
   * their entries other than unique-visitor registers reach `maxWrites` (the partition that reaches
   * it goes whole): the registers fill what is left of the bound (durable_writer.ts). Partitions
   * that cannot be written now (`writable` false: the lease's renewal is late) are passed over, in
   * their place. The rest stay, and `since` stays the oldest change before this take: the lag keeps
   * counting from it.
   */
  take(maxWrites: number, writable: (partition: number) => boolean = () => true): PageActor[] {
    const taken: PageActor[] = [];
    let writes = 0;
    for (const queue of [this.#byPartition, this.#rewrites])
      for (const [partition, actors] of queue) {
        if (writes >= maxWrites) break;
        if (!writable(partition)) continue;
        for (const actor of actors) {
          taken.push(actor);
          writes += actor.unwrittenCount - actor.registersWaiting;
        }
        queue.delete(partition);
        this.#size -= actors.size;
      }
    if (this.#byPartition.size === 0) this.#since = undefined;
    return taken;
  }
}
