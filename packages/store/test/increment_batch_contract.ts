/**
 * What every Store must do with one call of many increments (a gateway's batch on a hot page, group
 * committed): answer each op in order as if it were alone, fail only a stale fence's own ops, and
 * keep the digests exact however often one entry changes in the call.
 */
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import { bucketOf, type Fence, type IncrementOp, type Lease, type Store } from "@livecount/store";
import { pageIn, type OpenStore } from "./contract_stores.js";
import { expectedDigest } from "./convergence_contract.js";

const START_MS = 1_700_000_000_000;
const LEASE_MS = 10_000;
const KEY_TTL_MS = 60_000;

export function describeIncrementBatchContract(name: string, open: OpenStore): void {
  describe(`${name} increment batch contract`, () => {
    let store: Store;
    let nowMs: number;

    beforeEach(async () => {
      nowMs = START_MS;
      store = await open(() => nowMs);
    });
    afterEach(async () => {
      await store.close();
    });

    async function lease(partition: number, node = "node-a"): Promise<Lease> {
      const l = await store.acquire(partition, node, LEASE_MS);
      if (l === null) throw new Error(`partition ${partition} is held by another node`);
      return l;
    }

    const op = (fence: Fence, page: string, key: string, o: Partial<IncrementOp> = {}): IncrementOp => ({
      fence,
      page,
      counter: "likes",
      dc: "dc1",
      delta: 1,
      key,
      payload: "first",
      ...o,
    });

    test(`${name} - a call of hundreds of ops over two partitions answers each in order; a stale fence fails only its own`, async () => {
      const stale = await lease(1);
      nowMs += LEASE_MS;
      const current = await lease(0, "node-b");
      await lease(1, "node-b");
      const [p1, p2, q1] = [pageIn(0, 0), pageIn(0, 1), pageIn(1, 0)];
      // Keys repeat past 120 on the same page: the first use applies, the retry is a duplicate.
      const ops = Array.from({ length: 250 }, (_, i) =>
        i % 5 === 4 ? op(stale, q1, `s${i}`) : op(current, i % 2 === 0 ? p1 : p2, `k${i % 120}`),
      );
      const outcomes = await store.increment(ops, KEY_TTL_MS);
      const applied = new Map<string, Set<string>>([
        [p1, new Set()],
        [p2, new Set()],
      ]);
      outcomes.forEach((outcome, i) => {
        const o = ops[i]!;
        if (o.fence === stale) return expect(outcome).toEqual({ kind: "stale" });
        const keys = applied.get(o.page)!;
        if (keys.has(o.key)) return expect(outcome).toMatchObject({ kind: "duplicate", payload: "first" });
        keys.add(o.key);
        expect(outcome).toEqual({ kind: "applied", entry: { p: keys.size, n: 0 } });
      });
      expect(await store.load(p1)).toEqual({ likes: { dc1: { p: applied.get(p1)!.size, n: 0 } } });
      expect(await store.load(p2)).toEqual({ likes: { dc1: { p: applied.get(p2)!.size, n: 0 } } });
      expect(await store.load(q1)).toEqual({});
    });

    test(`${name} - a call changing the same entries many times (a hot page) keeps the digests exact`, async () => {
      const fence = await lease(2);
      const [hot, other] = [pageIn(2, 0), pageIn(2, 1)];
      const ops = Array.from({ length: 230 }, (_, i) =>
        op(fence, i % 7 === 0 ? other : hot, `k${i % 10 === 9 ? i - 9 : i}`, {
          counter: i % 3 === 0 ? "claps" : "likes",
          delta: i % 4 === 0 ? -2 : 1,
          // A tombstone changes with each: its group's settled share goes out and in the digest.
          also: [{ counter: "@del:likes", delta: 1 }],
        }),
      );
      await store.increment(ops, KEY_TTL_MS);
      const truth = new Map([
        [hot, await store.load(hot)],
        [other, await store.load(other)],
      ]);
      expect(await store.digests([2])).toEqual([expectedDigest(truth)]);
      const buckets = await store.bucketDigests(2);
      for (const page of [hot, other])
        expect(buckets[bucketOf(page)]).toBe(expectedDigest(truth, bucketOf(page)));
    });
  });
}
