/**
 * The Redis store's keys. Every key starts with the store's `keyPrefix` (default "lc:"):
 *
 * - `lease:{partition}` hash `{node, epoch, expiresAt}`: the partition's owner. Deleted on release.
 * - `epoch:{partition}` integer: last epoch handed out, INCR on every takeover and never deleted,
 *   so an epoch is never reused.
 * - `page:{page}` hash, field `{counter}\0{dc}` (counter names never hold NUL), value `"{p}:{n}"`.
 * - `idem:{len(page)}:{page}:{key}` hash `{counter, delta, payload, expiresAt}` (plus
 *   `fingerprint` when the op has one) with PEXPIRE keyTtlMs. The page's length makes the key
 *   unambiguous whatever the page and key contain.
 * - `pages` sorted set, every score 0, of page ids with at least one entry, listed by ZRANGEBYLEX.
 * - `nonzero:{partition}` set of `{page}\0{counter}\0{dc}`: entries written with `indexed` whose
 *   value is non-zero (p != n), so a new owner finds presence left behind by a dead one.
 * - `digest:{partition}` hash: `all` (the partition's digest), `b{bucket}` (each bucket's), `boot`
 *   (set once the partition is bootstrapped), `hw` (the presence floor, see Store.presenceFloor),
 *   `pf` (the purge floor, see Store.purgeFloor); see digest.ts.
 * - `bidx:{partition}` sorted set of the partition's page ids scored by digest bucket.
 * - `empty:{partition}` sorted set of the partition's empty pages, scored by when they became empty.
 * - `tombs:{partition}` sorted set of the partition's pages holding a tombstone, scored by when one
 *   last changed (the purge's candidates).
 * - `expiring:{partition}` sorted set of `{page}\0{field}` of the partition's time buckets, scored by
 *   when each expires (digest.ts, bucketExpiresAt): what Store.removeExpiredBuckets removes.
 *
 * Page ids are the last key segment (after a fixed prefix), so any printable id is unambiguous.
 */
export class RedisKeys {
  constructor(readonly prefix: string) {}

  lease(partition: number): string {
    return `${this.prefix}lease:${partition}`;
  }

  epoch(partition: number): string {
    return `${this.prefix}epoch:${partition}`;
  }

  page(page: string): string {
    return `${this.prefix}page:${page}`;
  }

  idem(page: string, key: string): string {
    return `${this.prefix}idem:${page.length}:${page}:${key}`;
  }

  nonZero(partition: number): string {
    return `${this.prefix}nonzero:${partition}`;
  }

  pages(): string {
    return `${this.prefix}pages`;
  }

  digest(partition: number): string {
    return `${this.prefix}digest:${partition}`;
  }

  bucketIndex(partition: number): string {
    return `${this.prefix}bidx:${partition}`;
  }

  empty(partition: number): string {
    return `${this.prefix}empty:${partition}`;
  }

  tombs(partition: number): string {
    return `${this.prefix}tombs:${partition}`;
  }

  expiring(partition: number): string {
    return `${this.prefix}expiring:${partition}`;
  }
  /**
   * The partition's keys the write and merge scripts take first, in their order: lease, pages,
   * non-zero index, digest, bucket index, empty index, tombstone index, expiring index
   * (redis_scripts.ts, lcWrite, lcMerge and lcPurge).
   */
  entryScriptKeys(partition: number): string[] {
    return [
      this.lease(partition),
      this.pages(),
      this.nonZero(partition),
      this.digest(partition),
      this.bucketIndex(partition),
      this.empty(partition),
      this.tombs(partition),
      this.expiring(partition),
    ];
  }
}
