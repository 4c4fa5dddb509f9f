/**
 * Where the contract suites' pages live, for a store on Redis Cluster. Such a store finds a page's
 * keys in its partition's slot, so it must know each page's partition, which a counter node takes
 * from the ring. The suites pick page ids and partitions freely instead; this places each page in the
 * partition of the first fence it is written under, and tells the store, which then rejects a write
 * of the page under any other (as it would a counter node's).
 */
import type { Store } from "@livecount/store";

export class PagePlacement {
  readonly #partitions = new Map<string, number>();

  /** The store's `partitionOf`: a page never written is in partition 0. */
  readonly partitionOf = (page: string): number => this.#partitions.get(page) ?? 0;

  #place(page: string, partition: number): void {
    if (!this.#partitions.has(page)) this.#partitions.set(page, partition);
  }

  /** `store`, placing the pages of every write, increment and merge before the store sees them. */
  wrap(store: Store): Store {
    return new Proxy(store, {
      get: (target, name, receiver) => {
        const value: unknown = Reflect.get(target, name, receiver);
        if (typeof value !== "function") return value;
        return (...args: never[]) => {
          this.#placeArgs(name, args);
          return (value as (...a: never[]) => unknown).apply(target, args);
        };
      },
    });
  }

  #placeArgs(name: string | symbol, args: readonly unknown[]): void {
    try {
      this.#placeValid(name, args);
    } catch {
      // Malformed input: the store rejects it, as the suites expect.
    }
  }

  #placeValid(name: string | symbol, args: readonly unknown[]): void {
    if (name === "write") {
      for (const { fence, writes } of args[0] as Parameters<Store["write"]>[0]) {
        for (const w of writes) this.#place(w.page, fence.partition);
      }
    } else if (name === "increment") {
      for (const op of args[0] as Parameters<Store["increment"]>[0]) this.#place(op.page, op.fence.partition);
    } else if (name === "mergePages") {
      const [fence, pages] = args as Parameters<Store["mergePages"]>;
      for (const page of pages.keys()) this.#place(page, fence.partition);
    } else if (name === "importKeys") {
      for (const [partition, records] of args[0] as Parameters<Store["importKeys"]>[0])
        for (const r of records) this.#place(r.page, partition);
    }
  }
}
