/**
 * The Redis store, on the keys redis_keys.ts lists.
 *
 * Time: every script gets the store's `now()` as an argument and stores absolute `expiresAt`
 * values, so leases and keys expire by the same clock as in the memory store. PEXPIRE on
 * idempotency keys only reclaims memory (by the Redis clock); whether a key still counts is decided
 * by its `expiresAt`.
 *
 * Each call is one round trip: a pipeline of Lua scripts, one per lease, write group or increment,
 * each atomic. A pipeline is not a transaction: if the connection fails mid-way, a prefix may be
 * applied. That is safe to retry: writes are max-merges and increments are idempotent by key.
 */
import type { Entry } from "@livecount/crdt";
import {
  StaleFenceError,
  StoreError,
  type AcquireOptions,
  type CounterRef,
  type EntryRef,
  type Fence,
  type FencedWrites,
  type IncrementOp,
  type IncrementOutcome,
  type Lease,
  type PageList,
  type PageRecord,
  type PurgeResult,
  type Store,
} from "./store.js";
import { DIGEST_BUCKETS, ZERO_DIGEST, bucketOf } from "./digest.js";
import { RecordsBuilder } from "./page_merge.js";
import { RedisKeys } from "./redis_keys.js";
import { purgeTombstones } from "./redis_purge.js";
import { removeExpiredBuckets } from "./redis_expiring.js";
import { entryField, pageRecord, parseEntry, parseOutcome, splitEntryField } from "./redis_records.js";
import { RedisConnection, queueScript, type Arg, type RedisConnectionOptions } from "./redis_connection.js";
import {
  assertIncrements,
  assertLimit,
  assertRecords,
  assertTtl,
  assertWrites,
  listStart,
} from "./validate.js";

export interface RedisStoreOptions extends RedisConnectionOptions {
  /** Prepended to every key, so several deployments or tests can share one server. Default "lc:". */
  readonly keyPrefix?: string;
  /** Clock for lease and key expiry, in epoch-ms. Default `Date.now`. */
  readonly now?: () => number;
}

const DEFAULT_KEY_PREFIX = "lc:";
/**
 * Pages read by one script call in loadMany: a few hundred HGETALLs keep Redis busy well under a
 * millisecond, so other clients' commands never wait long behind one.
 */
const PAGES_PER_LOAD = 256;
/**
 * Pages merged by one script call in mergePages: each page is merged atomically, and a script of a
 * hundred pages keeps Redis busy for about a millisecond, so other clients never wait long.
 */
const PAGES_PER_MERGE = 100;
/** Sorts after every printable ASCII character: the exclusive upper bound of a prefix range. */
const AFTER_PRINTABLE = "\u007f";

export class RedisStore implements Store {
  readonly #conn: RedisConnection;
  readonly #keys: RedisKeys;
  readonly #now: () => number;

  private constructor(conn: RedisConnection, prefix: string, now: () => number) {
    this.#conn = conn;
    this.#keys = new RedisKeys(prefix);
    this.#now = now;
  }

  /** Connects and waits until Redis is ready (AOF loaded); rejects with a StoreError if it cannot. */
  static async connect(options: RedisStoreOptions): Promise<RedisStore> {
    const conn = await RedisConnection.open(options);
    return new RedisStore(conn, options.keyPrefix ?? DEFAULT_KEY_PREFIX, options.now ?? Date.now);
  }

  async acquire(
    partition: number,
    node: string,
    ttlMs: number,
    options: AcquireOptions = {},
  ): Promise<Lease | null> {
    assertTtl("lease ttl", ttlMs);
    const now = this.#now();
    const expiresAt = now + ttlMs;
    const [epoch] = await this.#conn.run("acquire", (p) =>
      queueScript(
        p,
        "lcAcquire",
        [this.#keys.lease(partition), this.#keys.epoch(partition)],
        [node, now, expiresAt, options.reclaimFrom ?? ""],
      ),
    );
    return epoch === null ? null : { partition, node, epoch: Number(epoch), expiresAt };
  }

  async renew(leases: readonly Lease[], ttlMs: number): Promise<Lease[]> {
    assertTtl("lease ttl", ttlMs);
    this.#conn.assertOpen();
    if (leases.length === 0) return [];
    const now = this.#now();
    const expiresAt = now + ttlMs;
    const replies = await this.#conn.run("renew", (p) => {
      for (const l of leases) {
        queueScript(p, "lcRenew", [this.#keys.lease(l.partition)], [l.node, l.epoch, now, expiresAt]);
      }
    });
    return leases.filter((_, i) => replies[i] === 1).map((l) => ({ ...l, expiresAt }));
  }

  async release(lease: Lease): Promise<void> {
    await this.#conn.run("release", (p) =>
      queueScript(p, "lcRelease", [this.#keys.lease(lease.partition)], [lease.node, lease.epoch]),
    );
  }

  async load(page: string): Promise<PageRecord> {
    this.#conn.assertOpen();
    const fields = await this.#conn.client.hgetall(this.#keys.page(page)).catch((cause: unknown) => {
      throw new StoreError("redis load failed", { cause });
    });
    return pageRecord(fields);
  }

  async loadMany(pages: readonly string[]): Promise<PageRecord[]> {
    if (pages.length === 0) return [];
    const replies = await this.#conn.run("loadMany", (p) => {
      for (let i = 0; i < pages.length; i += PAGES_PER_LOAD) {
        const keys = pages.slice(i, i + PAGES_PER_LOAD).map((page) => this.#keys.page(page));
        queueScript(p, "lcLoad", keys, []);
      }
    });
    return replies.flatMap((chunk) => (chunk as string[][]).map((flat) => pageRecord(flat)));
  }

  async loadPrefixed(page: string, prefixes: readonly string[]): Promise<PageRecord> {
    if (prefixes.length === 0) return {};
    const [fields] = await this.#conn.run("loadPrefixed", (p) =>
      queueScript(p, "lcLoadPrefixed", [this.#keys.page(page)], ["1", ...prefixes]),
    );
    return pageRecord(fields as string[]);
  }

  async loadExcept(page: string, prefixes: readonly string[]): Promise<PageRecord> {
    const [fields] = await this.#conn.run("loadExcept", (p) =>
      queueScript(p, "lcLoadPrefixed", [this.#keys.page(page)], ["0", ...prefixes]),
    );
    return pageRecord(fields as string[]);
  }

  async loadEntries(page: string, refs: readonly CounterRef[]): Promise<Array<Entry | undefined>> {
    if (refs.length === 0) return [];
    const [values] = await this.#conn.run("loadEntries", (p) =>
      p.hmget(this.#keys.page(page), ...refs.map((r) => entryField(r.counter, r.dc))),
    );
    return (values as Array<string | null>).map((v) => (v === null ? undefined : parseEntry(v)));
  }

  async digests(partitions: readonly number[]): Promise<string[]> {
    if (partitions.length === 0) return [];
    const replies = await this.#conn.run("digests", (p) => {
      for (const partition of partitions) p.hget(this.#keys.digest(partition), "all");
    });
    return replies.map((d) => (typeof d === "string" ? d : ZERO_DIGEST));
  }

  async tombDigests(partitions: readonly number[]): Promise<string[]> {
    if (partitions.length === 0) return [];
    const replies = await this.#conn.run("tombDigests", (p) => {
      for (const partition of partitions) p.hget(this.#keys.digest(partition), "t");
    });
    return replies.map((d) => (typeof d === "string" ? d : ZERO_DIGEST));
  }

  async bucketDigests(partition: number): Promise<string[]> {
    const fields = Array.from({ length: DIGEST_BUCKETS }, (_, b) => `b${b}`);
    const [values] = await this.#conn.run("bucketDigests", (p) =>
      p.hmget(this.#keys.digest(partition), ...fields),
    );
    return (values as Array<string | null>).map((d) => d ?? ZERO_DIGEST);
  }

  async bucketPages(partition: number, buckets: readonly number[]): Promise<Map<string, PageRecord>> {
    if (buckets.length === 0) return new Map();
    const wanted = new Set(buckets);
    // One range read of the partition's index, filtered here: one command instead of one per bucket.
    const [scored] = await this.#conn.run("bucketPages", (p) =>
      p.zrangebyscore(
        this.#keys.bucketIndex(partition),
        Math.min(...wanted),
        Math.max(...wanted),
        "WITHSCORES",
      ),
    );
    const ids = scored as string[];
    const pages: string[] = [];
    for (let i = 0; i < ids.length; i += 2) if (wanted.has(Number(ids[i + 1]))) pages.push(ids[i]!);
    const records = await this.loadMany(pages);
    return new Map(pages.map((page, i) => [page, records[i]!]));
  }

  async presenceFloor(partition: number): Promise<number> {
    const [hw] = await this.#conn.run("presenceFloor", (p) => p.hget(this.#keys.digest(partition), "hw"));
    return hw === null ? 0 : Number(hw);
  }

  async removeEmptyPages(fence: Fence, emptySince: number, limit: number): Promise<string[]> {
    assertLimit(limit);
    const partition = fence.partition;
    const [candidates] = await this.#conn.run("emptyPages", (p) =>
      p.zrangebyscore(this.#keys.empty(partition), "-inf", emptySince, "LIMIT", 0, limit),
    );
    const pages = candidates as string[];
    if (pages.length === 0) return [];
    const now = this.#now();
    const replies = await this.#conn.run("removeEmptyPages", (p) => {
      for (const page of pages) {
        const keys = [
          this.#keys.lease(partition),
          this.#keys.page(page),
          this.#keys.pages(),
          this.#keys.bucketIndex(partition),
          this.#keys.empty(partition),
          this.#keys.digest(partition),
          this.#keys.expiring(partition),
        ];
        queueScript(p, "lcRemoveIfEmpty", keys, [fence.epoch, now, page, emptySince, bucketOf(page)]);
      }
    });
    if (replies.some((r) => r === -1)) throw new StaleFenceError(fence);
    return pages.filter((_, i) => replies[i] === 1);
  }

  async removeExpiredBuckets(fence: Fence, limit: number): Promise<number> {
    assertLimit(limit);
    return removeExpiredBuckets(this.#conn, this.#keys, fence, this.#now(), limit);
  }

  async purgeFloor(partition: number): Promise<number> {
    const [pf] = await this.#conn.run("purgeFloor", (p) => p.hget(this.#keys.digest(partition), "pf"));
    return pf === null ? 0 : Number(pf);
  }

  async countTombstonePages(partition: number, after: number, upTo: number): Promise<number> {
    const [n] = await this.#conn.run("countTombstonePages", (p) =>
      p.zcount(this.#keys.tombs(partition), `(${after}`, upTo),
    );
    return Number(n);
  }

  async raisePurgeFloor(fence: Fence, floor: number): Promise<boolean> {
    const [raised] = await this.#conn.run("raisePurgeFloor", (p) =>
      queueScript(
        p,
        "lcRaisePurgeFloor",
        [this.#keys.lease(fence.partition), this.#keys.digest(fence.partition)],
        [fence.epoch, this.#now(), floor],
      ),
    );
    return raised === 1;
  }

  async purgeTombstones(
    fence: Fence,
    deletedBefore: number,
    offset: number,
    limit: number,
  ): Promise<PurgeResult> {
    assertLimit(limit);
    return purgeTombstones(this.#conn, this.#keys, fence, this.#now(), { deletedBefore, offset, limit });
  }

  async isBootstrapped(partition: number): Promise<boolean> {
    const [boot] = await this.#conn.run("isBootstrapped", (p) =>
      p.hget(this.#keys.digest(partition), "boot"),
    );
    return boot === "1";
  }

  async markBootstrapped(fence: Fence): Promise<boolean> {
    const [marked] = await this.#conn.run("markBootstrapped", (p) =>
      queueScript(
        p,
        "lcMarkBootstrapped",
        [this.#keys.lease(fence.partition), this.#keys.digest(fence.partition)],
        [fence.epoch, this.#now()],
      ),
    );
    return marked === 1;
  }

  async write(groups: readonly FencedWrites[]): Promise<Fence[]> {
    assertWrites(groups);
    this.#conn.assertOpen();
    if (groups.length === 0) return [];
    const now = this.#now();
    const replies = await this.#conn.run("write", (p) => {
      for (const { fence, writes } of groups) {
        const partition = fence.partition;
        const keys = this.#keys.entryScriptKeys(partition);
        const args: Arg[] = [fence.epoch, now];
        for (const w of writes) {
          keys.push(this.#keys.page(w.page));
          args.push(
            w.page,
            entryField(w.counter, w.dc),
            w.entry.p,
            w.entry.n,
            w.indexed === true ? "1" : "0",
            bucketOf(w.page),
          );
        }
        queueScript(p, "lcWrite", keys, args);
      }
    });
    return groups.filter((_, i) => replies[i] !== 1).map((g) => g.fence);
  }

  async mergePages(
    fence: Fence,
    pages: ReadonlyMap<string, PageRecord>,
    indexedDc: string,
  ): Promise<Map<string, PageRecord> | null> {
    assertRecords(pages);
    this.#conn.assertOpen();
    if (pages.size === 0) return new Map();
    const partition = fence.partition;
    const ids = [...pages.keys()];
    const partitionKeys = this.#keys.entryScriptKeys(partition);
    const replies = await this.#conn.run("mergePages", (p) => {
      for (let from = 0; from < ids.length; from += PAGES_PER_MERGE) {
        const chunk = ids.slice(from, from + PAGES_PER_MERGE);
        const args: Arg[] = [fence.epoch, this.#now(), entryField("", indexedDc)];
        for (const page of chunk) {
          args.push(page, bucketOf(page), 0);
          const countAt = args.length - 1;
          for (const [counter, byDc] of Object.entries(pages.get(page)!)) {
            for (const [dc, e] of Object.entries(byDc)) args.push(entryField(counter, dc), e.p, e.n);
          }
          args[countAt] = (args.length - countAt - 1) / 3;
        }
        const keys = [...partitionKeys, ...chunk.map((page) => this.#keys.page(page))];
        queueScript(p, "lcMerge", keys, args);
      }
    });
    // Every chunk checks the fence: the lease may run out between two.
    if (replies.includes(0)) return null;
    const advanced = new RecordsBuilder();
    replies.forEach((reply, chunk) => {
      const flat = reply as Array<number | string[]>;
      for (let i = 0; i < flat.length; i += 2) {
        const page = ids[chunk * PAGES_PER_MERGE + (flat[i] as number) - 1]!;
        const fields = flat[i + 1] as string[];
        for (let f = 0; f < fields.length; f += 2) {
          const { counter, dc } = splitEntryField(fields[f]!);
          advanced.add(page, counter, dc, parseEntry(fields[f + 1]));
        }
      }
    });
    return advanced.build();
  }

  async increment(ops: readonly IncrementOp[], keyTtlMs: number): Promise<IncrementOutcome[]> {
    assertTtl("key ttl", keyTtlMs);
    assertIncrements(ops);
    this.#conn.assertOpen();
    if (ops.length === 0) return [];
    const now = this.#now();
    const replies = await this.#conn.run("increment", (p) => {
      for (const op of ops) {
        const keys = [
          this.#keys.lease(op.fence.partition),
          this.#keys.page(op.page),
          this.#keys.idem(op.page, op.key),
          this.#keys.pages(),
          this.#keys.digest(op.fence.partition),
          this.#keys.bucketIndex(op.fence.partition),
          this.#keys.empty(op.fence.partition),
          this.#keys.tombs(op.fence.partition),
          this.#keys.expiring(op.fence.partition),
        ];
        const field = entryField(op.counter, op.dc);
        const args = [
          op.fence.epoch,
          now,
          op.page,
          field,
          op.counter,
          op.delta,
          op.payload,
          now + keyTtlMs,
          keyTtlMs,
          op.fingerprint ?? "",
          bucketOf(op.page),
          op.startAt ?? 0,
        ];
        for (const c of op.also ?? []) args.push(entryField(c.counter, op.dc), c.delta);
        queueScript(p, "lcIncrement", keys, args);
      }
    });
    return replies.map((reply, i) => parseOutcome(reply, ops[i]!));
  }

  async nonZeroEntries(partition: number): Promise<EntryRef[]> {
    this.#conn.assertOpen();
    const members = await this.#conn.client
      .smembers(this.#keys.nonZero(partition))
      .catch((cause: unknown) => {
        throw new StoreError("redis nonZeroEntries failed", { cause });
      });
    return members.flatMap((member) => {
      // Page ids, counter names and DC ids never hold NUL, so the split is unambiguous.
      const [page, counter, dc] = member.split("\u0000");
      return page !== undefined && counter !== undefined && dc !== undefined ? [{ page, counter, dc }] : [];
    });
  }

  async listPages(prefix: string, cursor: string | undefined, limit: number): Promise<PageList> {
    assertLimit(limit);
    this.#conn.assertOpen();
    const { from, exclusive } = listStart(prefix, cursor);
    const min = `${exclusive ? "(" : "["}${from}`;
    const max = `(${prefix}${AFTER_PRINTABLE}`;
    // One more than asked tells whether another page follows.
    const ids = await this.#conn.client
      .zrangebylex(this.#keys.pages(), min, max, "LIMIT", 0, limit + 1)
      .catch((cause: unknown) => {
        throw new StoreError("redis listPages failed", { cause });
      });
    const pages = ids.slice(0, limit);
    return { pages, cursor: ids.length > limit ? pages.at(-1) : undefined };
  }

  async close(): Promise<void> {
    await this.#conn.close();
  }
}
