/**
 * The Redis store, on the keys redis_keys.ts lists.
 *
 * Time: every script gets the store's `now()` as an argument and stores absolute `expiresAt`
 * values, so keys expire by the same clock as in the memory store. Leases are the exception: they
 * run on the clock of the server holding them (LUA_LEASE_CLOCK), so a DC's processes agree on who
 * owns a partition whatever their own clocks say, unless the store was given a clock (tests). A
 * fence needs no clock: it is current while its lease carries its epoch and holder. PEXPIRE on
 * idempotency keys only reclaims memory (by the Redis clock); whether a key still counts is decided
 * by its `expiresAt`.
 *
 * Each call is one round trip: a pipeline of Lua scripts, one per lease, write group or increment,
 * each atomic. A pipeline is not a transaction: if the connection fails mid-way, a prefix may be
 * applied. That is safe to retry: writes are max-merges and increments are idempotent by key.
 *
 * On Redis Cluster (`cluster` seed nodes) every key of a partition carries its hash tag, so each
 * script touches one slot; a call sends one pipeline per partition it touches, all at once, so it
 * still takes one round trip of time. A page's keys are in its own partition (`partitionOf`), which
 * must be the partition of the fence it is written under, as the ring makes it.
 */
import type { Entry } from "@livecount/crdt";
import {
  InvalidStoreInputError,
  StaleFenceError,
  StoreError,
  type AcquireOptions,
  type BusNote,
  type CounterRef,
  type EntryRef,
  type Fence,
  type FencedWrites,
  type IncrementOp,
  type IncrementOutcome,
  type KeyRestore,
  type Lease,
  type PageList,
  type PageRecord,
  type PurgeResult,
  type Store,
} from "./store.js";
import { partitionOf as ringPartitionOf } from "@livecount/ring";
import { DIGEST_BUCKETS, ZERO_DIGEST, bucketOf } from "./digest.js";
import { RedisKeys } from "./redis_keys.js";
import { fenceArg } from "./redis_lua.js";
import { RedisLeases } from "./redis_leases.js";
import { purgeTombstones } from "./redis_purge.js";
import { removeExpiredBuckets } from "./redis_expiring.js";
import { entryField, pageRecord, parseEntry, readNonZero } from "./redis_records.js";
import { RedisConnection, queueScript, unpackr, type RedisConnectionOptions } from "./redis_connection.js";
import { listPages } from "./redis_listing.js";
import { importKeys, increment, mergePages, restoreKeys, writeGroups } from "./redis_entry_writes.js";
import { assertIncrements, assertLimit, assertRecords, assertTtl, assertWrites } from "./validate.js";

export interface RedisStoreOptions extends RedisConnectionOptions {
  /** Prepended to every key, so several deployments or tests can share one server. Default "lc:". */
  readonly keyPrefix?: string;
  /**
   * Clock for key expiry, in epoch-ms; given, leases run on it too instead of the Redis server's
   * (tests drive leases with a manual clock). Default `Date.now`.
   */
  readonly now?: () => number;
  /**
   * Partitions pages hash into (LIVECOUNT_PARTITIONS, the same in every process). On Redis Cluster
   * it says which partition's slot holds a page's keys, and which page lists a listing merges.
   * Default 256.
   */
  readonly partitions?: number;
  /** The partition of a page. Default: the ring's (`partitionOf(page, partitions)`). */
  readonly partitionOf?: (page: string) => number;
}

const DEFAULT_KEY_PREFIX = "lc:";
const DEFAULT_PARTITIONS = 256;
/**
 * Pages read by one script call in loadMany: a few hundred HGETALLs keep Redis busy well under a
 * millisecond, so other clients' commands never wait long behind one.
 */
const PAGES_PER_LOAD = 256;

export class RedisStore implements Store {
  readonly #conn: RedisConnection;
  readonly #leases: RedisLeases;
  readonly #keys: RedisKeys;
  readonly #now: () => number;
  readonly #partitions: number;
  readonly #partitionOf: (page: string) => number;

  private constructor(conn: RedisConnection, leases: RedisConnection, options: RedisStoreOptions) {
    this.#conn = conn;
    this.#keys = new RedisKeys(options.keyPrefix ?? DEFAULT_KEY_PREFIX, conn.clustered);
    this.#now = options.now ?? Date.now;
    // "": the lease scripts read the server's clock (LUA_LEASE_CLOCK).
    const leaseNow = options.now ?? ((): "" => "");
    this.#leases = new RedisLeases(leases, this.#keys, leaseNow);
    const partitions = options.partitions ?? DEFAULT_PARTITIONS;
    this.#partitions = partitions;
    this.#partitionOf = options.partitionOf ?? ((page) => ringPartitionOf(page, partitions));
  }

  /**
   * Connects and waits until Redis is ready (AOF loaded; on a cluster, every slot served); rejects
   * with a StoreError if it cannot.
   */
  static async connect(options: RedisStoreOptions): Promise<RedisStore> {
    const partitions = options.partitions ?? DEFAULT_PARTITIONS;
    if (!Number.isInteger(partitions) || partitions < 1)
      throw new StoreError("partitions must be an integer >= 1");
    if (options.cluster !== undefined && (options.keyPrefix ?? "").includes("{")) {
      throw new StoreError(
        "on redis cluster the key prefix must not hold '{': the store places hash tags itself",
      );
    }
    const conn = await RedisConnection.open(options);
    const leases = await RedisConnection.open(options).catch(async (err: unknown) => {
      await conn.close();
      throw err;
    });
    return new RedisStore(conn, leases, options);
  }

  /** The key of a page's hash (its partition's slot on a cluster). */
  #page(page: string): string {
    // One Redis keys a page by its id alone: no hash needed.
    return this.#keys.page(page, this.#conn.clustered ? this.#partitionOf(page) : 0);
  }

  /**
   * On a cluster a page's keys are in its partition's slot, so a page written under another
   * partition's fence would be written where no read finds it: a caller bug, rejected before
   * anything is applied. One Redis keys pages by id alone, so it does not need to check.
   */
  #assertPlaced(page: string, partition: number): void {
    if (this.#conn.clustered && this.#partitionOf(page) !== partition) {
      throw new InvalidStoreInputError(`page "${page}" is not in partition ${partition}`);
    }
  }

  acquire(partition: number, node: string, ttlMs: number, options?: AcquireOptions): Promise<Lease | null> {
    return this.#leases.acquire(partition, node, ttlMs, options);
  }

  renew(leases: readonly Lease[], ttlMs: number): Promise<Lease[]> {
    return this.#leases.renew(leases, ttlMs);
  }

  release(lease: Lease): Promise<void> {
    return this.#leases.release(lease);
  }

  noteBusHeard(node: string, continuing: boolean): Promise<void> {
    return this.#leases.noteBusHeard(node, continuing);
  }

  busHeard(): Promise<{ now: number; notes: Map<string, BusNote> }> {
    return this.#leases.busHeard();
  }

  async load(page: string): Promise<PageRecord> {
    this.#conn.assertOpen();
    const fields = await this.#conn.client.hgetall(this.#page(page)).catch((cause: unknown) => {
      throw new StoreError("redis load failed", { cause });
    });
    return pageRecord(fields);
  }

  async loadMany(pages: readonly string[]): Promise<PageRecord[]> {
    if (pages.length === 0) return [];
    // Pages by partition (all one group on one Redis), each group read by scripts of at most
    // PAGES_PER_LOAD pages: a script reads one slot.
    const groups = new Map<number, number[]>();
    pages.forEach((page, i) => {
      const group = this.#conn.clustered ? this.#partitionOf(page) : 0;
      const members = groups.get(group) ?? [];
      members.push(i);
      groups.set(group, members);
    });
    const chunks: Array<{ partition: number; indexes: number[] }> = [];
    for (const [partition, indexes] of groups) {
      for (let i = 0; i < indexes.length; i += PAGES_PER_LOAD) {
        chunks.push({ partition, indexes: indexes.slice(i, i + PAGES_PER_LOAD) });
      }
    }
    const replies = await this.#conn.run("loadMany", (pipe) => {
      for (const { partition, indexes } of chunks) {
        queueScript(
          pipe(partition),
          "lcLoad",
          indexes.map((i) => this.#page(pages[i]!)),
          [],
          { buffer: true },
        );
      }
    });
    const records = new Array<PageRecord>(pages.length);
    chunks.forEach(({ indexes }, c) => {
      // One buffer per script (MessagePack): a nested reply costs ioredis a decode step per string.
      const lists = unpackr.unpack(replies[c] as Buffer) as unknown[][];
      lists.forEach((flat, k) => (records[indexes[k]!] = pageRecord(flat)));
    });
    return records;
  }

  async loadPrefixed(page: string, prefixes: readonly string[]): Promise<PageRecord> {
    if (prefixes.length === 0) return {};
    const [fields] = await this.#conn.run("loadPrefixed", (pipe) =>
      queueScript(pipe(this.#partitionOf(page)), "lcLoadPrefixed", [this.#page(page)], ["1", ...prefixes]),
    );
    return pageRecord(fields as string[]);
  }

  async loadExcept(page: string, prefixes: readonly string[]): Promise<PageRecord> {
    const [fields] = await this.#conn.run("loadExcept", (pipe) =>
      queueScript(pipe(this.#partitionOf(page)), "lcLoadPrefixed", [this.#page(page)], ["0", ...prefixes]),
    );
    return pageRecord(fields as string[]);
  }

  async loadEntries(page: string, refs: readonly CounterRef[]): Promise<Array<Entry | undefined>> {
    if (refs.length === 0) return [];
    const [values] = await this.#conn.run("loadEntries", (pipe) =>
      pipe(this.#partitionOf(page)).hmget(this.#page(page), ...refs.map((r) => entryField(r.counter, r.dc))),
    );
    return (values as Array<string | null>).map((v) => (v === null ? undefined : parseEntry(v)));
  }

  async digests(partitions: readonly number[]): Promise<string[]> {
    if (partitions.length === 0) return [];
    const replies = await this.#conn.run("digests", (pipe) => {
      for (const partition of partitions) pipe(partition).hget(this.#keys.digest(partition), "all");
    });
    return replies.map((d) => (typeof d === "string" ? d : ZERO_DIGEST));
  }

  async tombDigests(partitions: readonly number[]): Promise<string[]> {
    if (partitions.length === 0) return [];
    const replies = await this.#conn.run("tombDigests", (pipe) => {
      for (const partition of partitions) pipe(partition).hget(this.#keys.digest(partition), "t");
    });
    return replies.map((d) => (typeof d === "string" ? d : ZERO_DIGEST));
  }

  async bucketDigests(partition: number): Promise<string[]> {
    const fields = Array.from({ length: DIGEST_BUCKETS }, (_, b) => `b${b}`);
    const [values] = await this.#conn.run("bucketDigests", (pipe) =>
      pipe(partition).hmget(this.#keys.digest(partition), ...fields),
    );
    return (values as Array<string | null>).map((d) => d ?? ZERO_DIGEST);
  }

  async bucketPages(partition: number, buckets: readonly number[]): Promise<Map<string, PageRecord>> {
    if (buckets.length === 0) return new Map();
    const wanted = new Set(buckets);
    // One range read of the partition's index, filtered here: one command instead of one per bucket.
    const [scored] = await this.#conn.run("bucketPages", (pipe) =>
      pipe(partition).zrangebyscore(
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
    const [hw] = await this.#conn.run("presenceFloor", (pipe) =>
      pipe(partition).hget(this.#keys.digest(partition), "hw"),
    );
    return hw === null ? 0 : Number(hw);
  }

  async removeEmptyPages(fence: Fence, emptySince: number, limit: number): Promise<string[]> {
    assertLimit(limit);
    const partition = fence.partition;
    const [candidates] = await this.#conn.run("emptyPages", (pipe) =>
      pipe(partition).zrangebyscore(this.#keys.empty(partition), "-inf", emptySince, "LIMIT", 0, limit),
    );
    const pages = candidates as string[];
    if (pages.length === 0) return [];
    const now = this.#now();
    const replies = await this.#conn.run("removeEmptyPages", (pipe) => {
      for (const page of pages) {
        const keys = [
          this.#keys.lease(partition),
          this.#keys.page(page, partition),
          this.#keys.pages(partition),
          this.#keys.bucketIndex(partition),
          this.#keys.empty(partition),
          this.#keys.digest(partition),
          this.#keys.expiring(partition),
        ];
        queueScript(pipe(partition), "lcRemoveIfEmpty", keys, [
          fenceArg(fence),
          now,
          page,
          emptySince,
          bucketOf(page),
        ]);
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
    const [pf] = await this.#conn.run("purgeFloor", (pipe) =>
      pipe(partition).hget(this.#keys.digest(partition), "pf"),
    );
    return pf === null ? 0 : Number(pf);
  }

  async countTombstonePages(partition: number, after: number, upTo: number): Promise<number> {
    const [n] = await this.#conn.run("countTombstonePages", (pipe) =>
      pipe(partition).zcount(this.#keys.tombs(partition), `(${after}`, upTo),
    );
    return Number(n);
  }

  async raisePurgeFloor(fence: Fence, floor: number): Promise<boolean> {
    const [raised] = await this.#conn.run(
      "raisePurgeFloor",
      (pipe) =>
        queueScript(
          pipe(fence.partition),
          "lcRaisePurgeFloor",
          [this.#keys.lease(fence.partition), this.#keys.digest(fence.partition)],
          [fenceArg(fence), this.#now(), floor],
        ),
      { durable: true },
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
    const [boot] = await this.#conn.run("isBootstrapped", (pipe) =>
      pipe(partition).hget(this.#keys.digest(partition), "boot"),
    );
    return boot === "1";
  }

  async markBootstrapped(fence: Fence): Promise<boolean> {
    const [marked] = await this.#conn.run(
      "markBootstrapped",
      (pipe) =>
        queueScript(
          pipe(fence.partition),
          "lcMarkBootstrapped",
          [this.#keys.lease(fence.partition), this.#keys.digest(fence.partition)],
          [fenceArg(fence), this.#now()],
        ),
      { durable: true },
    );
    return marked === 1;
  }

  async write(groups: readonly FencedWrites[]): Promise<Fence[]> {
    assertWrites(groups);
    for (const { fence, writes } of groups)
      for (const w of writes) this.#assertPlaced(w.page, fence.partition);
    this.#conn.assertOpen();
    if (groups.length === 0) return [];
    return writeGroups(this.#conn, this.#keys, this.#now(), groups);
  }

  async mergePages(
    fence: Fence,
    pages: ReadonlyMap<string, PageRecord>,
    indexedDc: string,
  ): Promise<Map<string, PageRecord> | null> {
    assertRecords(pages);
    for (const page of pages.keys()) this.#assertPlaced(page, fence.partition);
    this.#conn.assertOpen();
    if (pages.size === 0) return new Map();
    return mergePages(this.#conn, this.#keys, this.#now, { fence, pages, indexedDc });
  }

  onReconnect(listener: () => void): void {
    this.#conn.onReconnect(listener);
  }

  async restoreKeys(fence: Fence, records: readonly KeyRestore[], keyTtlMs: number): Promise<boolean> {
    assertTtl("key ttl", keyTtlMs);
    for (const r of records) this.#assertPlaced(r.page, fence.partition);
    this.#conn.assertOpen();
    return restoreKeys(this.#conn, this.#keys, this.#now(), { fence, records, keyTtlMs });
  }

  async importKeys(
    byPartition: ReadonlyMap<number, readonly KeyRestore[]>,
    keyTtlMs: number,
  ): Promise<number> {
    assertTtl("key ttl", keyTtlMs);
    for (const [partition, records] of byPartition)
      for (const r of records) this.#assertPlaced(r.page, partition);
    this.#conn.assertOpen();
    return importKeys(this.#conn, this.#keys, this.#now(), { byPartition, keyTtlMs });
  }

  async increment(ops: readonly IncrementOp[], keyTtlMs: number): Promise<IncrementOutcome[]> {
    assertTtl("key ttl", keyTtlMs);
    assertIncrements(ops);
    for (const op of ops) this.#assertPlaced(op.page, op.fence.partition);
    this.#conn.assertOpen();
    if (ops.length === 0) return [];
    return increment(this.#conn, this.#keys, this.#now(), ops, keyTtlMs);
  }

  async nonZeroEntries(partition: number): Promise<EntryRef[]> {
    this.#conn.assertOpen();
    return readNonZero(this.#conn, this.#keys.nonZero(partition));
  }

  async listPages(prefix: string, cursor: string | undefined, limit: number): Promise<PageList> {
    assertLimit(limit);
    this.#conn.assertOpen();
    return listPages(this.#conn, this.#keys, this.#partitions, { prefix, cursor, limit });
  }

  async close(): Promise<void> {
    await Promise.all([this.#conn.close(), this.#leases.close()]);
  }
}
