/** The memory store's pages by partition and digest bucket (Store.bucketPages). */
import { bucketOf } from "./digest.js";

export class BucketIndex {
  /** partition -> bucket -> page ids. */
  readonly #pages = new Map<number, Map<number, Set<string>>>();

  add(partition: number, page: string): void {
    let buckets = this.#pages.get(partition);
    if (buckets === undefined) this.#pages.set(partition, (buckets = new Map()));
    const bucket = bucketOf(page);
    let pages = buckets.get(bucket);
    if (pages === undefined) buckets.set(bucket, (pages = new Set()));
    pages.add(page);
  }

  remove(partition: number, page: string): void {
    this.#pages.get(partition)?.get(bucketOf(page))?.delete(page);
  }

  pages(partition: number, bucket: number): Iterable<string> {
    return this.#pages.get(partition)?.get(bucket) ?? [];
  }
}
