import type { PageActor } from "./page_actor.js";

/**
 * The page actors whose entries wait for a flush, in the order they became dirty, and since when
 * the oldest change among them waits: what the durable writer flushes next, and its lag.
 */
export class DirtyPages {
  readonly #actors = new Set<PageActor>();
  /** When the oldest change not yet taken by a flush was made; undefined when there is none. */
  #since: number | undefined;

  /** The actor has entries to persist and publish, changed at `since`. */
  add(actor: PageActor, since: number): void {
    this.#actors.add(actor);
    this.#since = Math.min(since, this.#since ?? since);
  }

  /** The actor left memory. */
  delete(actor: PageActor): void {
    this.#actors.delete(actor);
  }

  get size(): number {
    return this.#actors.size;
  }

  /** When the oldest change not yet taken by a flush was made; undefined when none waits. */
  get since(): number | undefined {
    return this.#since;
  }

  /**
   * Takes actors, the longest dirty first, until their entries reach `maxWrites`. The rest stay, and
   * `since` stays the oldest change before this take: the lag keeps counting from it.
   */
  take(maxWrites: number): PageActor[] {
    const taken: PageActor[] = [];
    let writes = 0;
    for (const actor of this.#actors) {
      if (writes >= maxWrites) break;
      taken.push(actor);
      this.#actors.delete(actor);
      writes += actor.unwrittenCount;
    }
    if (this.#actors.size === 0) this.#since = undefined;
    return taken;
  }
}
