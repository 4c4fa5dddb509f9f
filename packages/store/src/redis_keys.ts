/**
 * The Redis store's keys. Every key starts with the store's `keyPrefix` (default "lc:"). `{partition}`
 * below is the partition number on one Redis, and a hash tag `{p<partition>}` on Redis Cluster, so
 * that every key of a partition, its pages' keys included, lives in one slot and every script
 * stays single-slot:
 *
 * - `lease:{partition}` hash `{node, epoch, expiresAt}`: the partition's owner. Deleted on release.
 * - `epoch:{partition}` integer: last epoch handed out, INCR on every takeover and never deleted,
 *   so an epoch is never reused.
 * - `page:{page}` hash (on Redis Cluster `page:{p<partition>}:{page}`), field `{counter}\0{dc}` (counter names never hold NUL), value `"{p}:{n}"`.
 * - `idem:{len(page)}:{page}:{key}` hash (on Redis Cluster `idem:{p<partition>}:...`) `{counter, delta, payload, expiresAt}` (plus
 *   `fingerprint` when the op has one) with PEXPIRE keyTtlMs. The page's length makes the key
 *   unambiguous whatever the page and key contain.
 * - `pages` sorted set, every score 0, of page ids with at least one entry, listed by ZRANGEBYLEX; on
 *   Redis Cluster one per partition (`pages:{p<partition>}`), merged in order by listings.
 * - `nonzero:{partition}` set of `{page}\0{counter}\0{dc}`: entries written with `indexed` whose
 *   value is non-zero (p != n), so a new owner finds presence left behind by a dead one.
 * - `digest:{partition}` hash: `all` (the partition's digest), `b{bucket}` (each bucket's), `boot`
 *   (set once the partition is bootstrapped), `hw` (the presence floor, see Store.presenceFloor),
 *   `pf` (the purge floor, see Store.purgeFloor); see digest.ts.
 * - `bidx:{partition}` sorted set of the partition's page ids scored by digest bucket.
 * - `empty:{partition}` sorted set of the partition's empty pages, scored by when they became empty.
 * - `tombs:{partition}` sorted set of the partition's pages holding a tombstone, scored by when one
 *   last changed (the purge's candidates).
 * - `busheard` hash (on Redis Cluster `busheard:{p0}`), node id -> `"{since}:{at}"` (epoch-ms): each
 *   counter node of the DC heard its bus without a break from since to at (Store.noteBusHeard). One
 *   field per node id ever used.
 * - `expiring:{partition}` sorted set of `{page}\0{field}` of the partition's time buckets, scored by
 *   when each expires (digest.ts, bucketExpiresAt): what Store.removeExpiredBuckets removes.
 *
 * Page ids are the last key segment (after a fixed prefix), so any printable id is unambiguous.
 */
/** The partition whose slot holds the bus notes on Redis Cluster (their key carries its tag). */
export const BUS_NOTES_PARTITION = 0;

/** The hash tag of a partition's keys on Redis Cluster: every key holding it is in one slot. */
export function partitionTag(partition: number): string {
  return `{p${partition}}`;
}

export class RedisKeys {
  /**
   * `tagged`: the Redis Cluster layout. One Redis keeps the layout it always had (no tags, one page
   * list), so an existing store needs no migration.
   */
  constructor(
    readonly prefix: string,
    readonly tagged: boolean,
  ) {}

  #of(name: string, partition: number): string {
    return this.tagged
      ? `${this.prefix}${name}:${partitionTag(partition)}`
      : `${this.prefix}${name}:${partition}`;
  }

  lease(partition: number): string {
    return this.#of("lease", partition);
  }

  epoch(partition: number): string {
    return this.#of("epoch", partition);
  }

  /** The page's hash; `partition` is the page's own (only the cluster layout names it). */
  page(page: string, partition: number): string {
    return this.tagged ? `${this.#of("page", partition)}:${page}` : `${this.prefix}page:${page}`;
  }

  idem(page: string, partition: number, key: string): string {
    const unambiguous = `${page.length}:${page}:${key}`;
    return this.tagged
      ? `${this.#of("idem", partition)}:${unambiguous}`
      : `${this.prefix}idem:${unambiguous}`;
  }

  nonZero(partition: number): string {
    return this.#of("nonzero", partition);
  }

  /** The list of pages that holds the partition's pages: the one list of all pages on one Redis. */
  pages(partition: number): string {
    return this.tagged ? this.#of("pages", partition) : `${this.prefix}pages`;
  }

  digest(partition: number): string {
    return this.#of("digest", partition);
  }

  bucketIndex(partition: number): string {
    return this.#of("bidx", partition);
  }

  empty(partition: number): string {
    return this.#of("empty", partition);
  }

  tombs(partition: number): string {
    return this.#of("tombs", partition);
  }

  /** The counter nodes' notes of hearing their bus: one key, in partition 0's slot on a cluster. */
  busHeard(): string {
    return this.tagged ? this.#of("busheard", BUS_NOTES_PARTITION) : `${this.prefix}busheard`;
  }

  expiring(partition: number): string {
    return this.#of("expiring", partition);
  }
  /**
   * The partition's keys the write and merge scripts take first, in their order: lease, pages,
   * non-zero index, digest, bucket index, empty index, tombstone index, expiring index
   * (redis_scripts.ts, lcWrite, lcMerge and lcPurge).
   */
  entryScriptKeys(partition: number): string[] {
    return [
      this.lease(partition),
      this.pages(partition),
      this.nonZero(partition),
      this.digest(partition),
      this.bucketIndex(partition),
      this.empty(partition),
      this.tombs(partition),
      this.expiring(partition),
    ];
  }
}
