/**
 * What every Store must do with pages whose presence emptied, run inside the convergence contract's
 * describe block (convergence_contract.ts): the presence floor, and pages empty long enough removed
 * from pages, listings and indexes under a current fence, digests untouched.
 */
import { expect, test } from "vitest";
import { StaleFenceError, bucketOf, type Lease, type Store } from "@livecount/store";
import { KEY_TTL_MS, START_MS, pageIn } from "./contract_stores.js";

/** The stores a convergence contract test opens, on one manual clock. */
export interface ConvergenceStores {
  /** A new, empty store reading the test's clock; closed after the test. */
  fresh(): Promise<Store>;
  /** A lease of `partition` for `node` ("node-a" by default) in `store`. */
  lease(store: Store, partition: number, node?: string): Promise<Lease>;
  /** The test's clock, in ms. */
  readonly nowMs: number;
  /** Moves the test's clock forward by `ms`. */
  advance(ms: number): void;
}

export function describeEmptyPages(name: string, stores: ConvergenceStores): void {
  const { fresh, lease } = stores;

  test(`${name} - the presence floor rises with own presence entries only, and never falls`, async () => {
    const store = await fresh();
    const fence = await lease(store, 11);
    const [a, b] = [pageIn(11, 0), pageIn(11, 1)];
    expect(await store.presenceFloor(11)).toBe(0);
    await store.write([
      {
        fence,
        writes: [
          { page: a, counter: "@viewers", dc: "dc1", entry: { p: 7, n: 2 }, indexed: true },
          { page: b, counter: "@viewers", dc: "dc2", entry: { p: 50, n: 0 } },
          { page: b, counter: "likes", dc: "dc1", entry: { p: 90, n: 0 } },
        ],
      },
    ]);
    expect(await store.presenceFloor(11)).toBe(7);
    await store.write([
      {
        fence,
        writes: [{ page: b, counter: "@viewers", dc: "dc1", entry: { p: 5, n: 5 }, indexed: true }],
      },
    ]);
    expect(await store.presenceFloor(11)).toBe(7);
    expect(await store.presenceFloor(12)).toBe(0);
  });

  test(`${name} - pages empty long enough are removed from pages, listings and indexes; others stay`, async () => {
    const store = await fresh();
    const fence = await lease(store, 13);
    const [emptyOld, emptyNew, back, liked, viewed] = [0, 1, 2, 3, 4].map((i) => pageIn(13, i)) as [
      string,
      string,
      string,
      string,
      string,
    ];
    const presence = (page: string, entry: { p: number; n: number }) => ({
      page,
      counter: "@viewers",
      dc: "dc1",
      entry,
      indexed: true,
    });
    await store.write([
      { fence, writes: [emptyOld, back, liked, viewed].map((p) => presence(p, { p: 2, n: 1 })) },
    ]);
    const before = await store.digests([13]);
    await store.write([{ fence, writes: [emptyOld, back, liked].map((p) => presence(p, { p: 2, n: 2 })) }]);
    await store.increment(
      [{ fence, page: liked, counter: "likes", dc: "dc1", delta: 1, key: "k", payload: "x" }],
      KEY_TTL_MS,
    );
    stores.advance(1_000);
    await store.write([{ fence, writes: [presence(emptyNew, { p: 1, n: 1 })] }]);
    // `back` gets a viewer again after it was empty: its time restarts.
    await store.write([{ fence, writes: [presence(back, { p: 3, n: 2 })] }]);
    stores.advance(1_000);
    await store.write([{ fence, writes: [presence(back, { p: 3, n: 3 })] }]);
    const cutoff = START_MS + 500;
    expect(await store.removeEmptyPages(fence, cutoff, 100)).toEqual([emptyOld]);
    expect(await store.load(emptyOld)).toEqual({});
    const listed = (await store.listPages("", undefined, 100)).pages;
    expect(listed).not.toContain(emptyOld);
    expect(listed).toEqual(expect.arrayContaining([emptyNew, back, liked, viewed]));
    expect([...(await store.bucketPages(13, [bucketOf(emptyOld)])).keys()]).not.toContain(emptyOld);
    // What the removed page held were zero presence entries: the digests did not move.
    expect(await store.digests([13])).not.toEqual(before);
    const after = await store.digests([13]);
    await store.removeEmptyPages(fence, stores.nowMs, 100);
    expect(await store.digests([13])).toEqual(after);
    expect((await store.listPages("", undefined, 100)).pages.sort()).toEqual([liked, viewed].sort());
    // A page written again after its removal is a page again.
    await store.write([{ fence, writes: [presence(emptyOld, { p: 9, n: 8 })] }]);
    expect((await store.listPages("", undefined, 100)).pages).toContain(emptyOld);
  });

  test(`${name} - removing empty pages needs a current fence and honours the limit`, async () => {
    const store = await fresh();
    const fence = await lease(store, 14);
    const pages = Array.from({ length: 5 }, (_, i) => pageIn(14, i));
    await store.write([
      {
        fence,
        writes: pages.map((page) => ({
          page,
          counter: "@viewers",
          dc: "dc1",
          entry: { p: 1, n: 1 },
          indexed: true,
        })),
      },
    ]);
    await expect(
      store.removeEmptyPages({ ...fence, epoch: fence.epoch + 1 }, stores.nowMs, 10),
    ).rejects.toBeInstanceOf(StaleFenceError);
    expect(await store.removeEmptyPages(fence, stores.nowMs, 2)).toHaveLength(2);
    expect(await store.removeEmptyPages(fence, stores.nowMs, 10)).toHaveLength(3);
    expect((await store.listPages("", undefined, 10)).pages).toEqual([]);
  });

  test(`${name} - a presence entry written twice in one write counts for emptiness by its last value`, async () => {
    const store = await fresh();
    const fence = await lease(store, 15);
    const [emptied, held] = [pageIn(15, 0), pageIn(15, 1)] as [string, string];
    const viewers = (page: string, p: number, n: number, dc = "dc1") => ({
      page,
      counter: "@viewers",
      dc,
      entry: { p, n },
      indexed: dc === "dc1",
    });
    // A turn's remote entries arrive in one write: the same entry twice, a later one after it.
    await store.write([
      {
        fence,
        writes: [
          viewers(emptied, 5, 4, "dc2"),
          viewers(emptied, 5, 5, "dc2"),
          viewers(held, 2, 2, "dc2"),
          viewers(held, 3, 2, "dc2"),
        ],
      },
    ]);
    expect(await store.removeEmptyPages(fence, stores.nowMs, 10)).toEqual([emptied]);
    expect((await store.listPages("", undefined, 10)).pages).toEqual([held]);
  });
}
