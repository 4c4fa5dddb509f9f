/**
 * When another DC was last known to hold every tombstone this DC's store holds, per partition: the
 * times anti-entropy found their tombstone digests equal (each taken before this store's digest was
 * read). A purge may remove a tombstone only once every other DC has held it for a while
 * (`graceMs`): a copy of the counter from before the delete that such a DC read earlier may still be
 * on its way (an anti-entropy transfer in flight), and must have arrived, and been hidden by the
 * tombstone, before the tombstone goes.
 */
export class TombAgreements {
  readonly #graceMs: number;
  /** partition -> DC -> agreement times, ascending; older ones pruned but the newest old enough. */
  readonly #times = new Map<number, Map<string, number[]>>();

  constructor(graceMs: number) {
    this.#graceMs = graceMs;
  }

  /** Anti-entropy found the partition's tombstone digests equal with `dc`, as of `at`. */
  agreed(partition: number, dc: string, at: number): void {
    let byDc = this.#times.get(partition);
    if (byDc === undefined) this.#times.set(partition, (byDc = new Map()));
    const times = byDc.get(dc) ?? [];
    if (times.length > 0 && at <= times[times.length - 1]!) return;
    times.push(at);
    // Of the times at least a grace old, only the newest can matter.
    const old = at - this.#graceMs;
    let keepFrom = 0;
    while (keepFrom + 1 < times.length && times[keepFrom + 1]! <= old) keepFrom++;
    byDc.set(dc, times.slice(keepFrom));
  }

  /** The partition changed hands: what this node learnt of it no longer speaks for its store. */
  forget(partition: number): void {
    this.#times.delete(partition);
  }

  /**
   * Tombstones that last changed at or before this time are held by `dc`, and have been for at
   * least the grace, as of `now`: the latest agreement a grace old or older, less 1 ms (a tombstone
   * written in the same millisecond may have missed the digest read). 0 when there is none.
   */
  heldUntil(partition: number, dc: string, now: number): number {
    const times = this.#times.get(partition)?.get(dc) ?? [];
    let held = 0;
    for (const at of times) if (at <= now - this.#graceMs) held = at - 1;
    return held;
  }
}
