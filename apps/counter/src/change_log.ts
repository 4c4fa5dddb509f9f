/**
 * When this node last published this DC's entries of each page: what a resync publishes again. In
 * memory, for `retentionMs`: a resync reaches back at most that far.
 */
export class ChangeLog {
  readonly #changedAt = new Map<string, number>();

  constructor(private readonly retentionMs: number) {}

  record(page: string, ts: number): void {
    this.#changedAt.set(page, ts);
  }

  /** Pages published at or after `since`, of the partitions accepted by `include` (all by default). */
  since(since: number, include?: (page: string) => boolean): string[] {
    const pages: string[] = [];
    for (const [page, at] of this.#changedAt)
      if (at >= since && (include === undefined || include(page))) pages.push(page);
    return pages;
  }

  /** Forgets pages published longer than the retention before `now`. */
  prune(now: number): void {
    for (const [page, at] of this.#changedAt) if (now - at > this.retentionMs) this.#changedAt.delete(page);
  }
}
