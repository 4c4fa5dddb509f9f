import type { Fence } from "@livecount/store";

/**
 * Per transfer under way from a peer (`peer|partition`), the lease epoch its first entries merged
 * under, and whether it has a gap: entries not merged (no lease held, the store refused it because
 * another node took the partition, or the merge failed), or merged under another tenure's lease
 * than its first. A transfer with a gap teaches no bootstrap (AntiEntropy: its `done` is not taken
 * as the peer's whole state); the peer is asked again.
 */
export class TransferGaps {
  readonly #epochs = new Map<string, number>();
  readonly #gapped = new Set<string>();

  /**
   * Whether the transfer's next entries may merge under `lease` (the partition's, as held now); if
   * not, the gap is noted.
   */
  mayMerge(peer: string, partition: number, lease: Fence | undefined): lease is Fence {
    const k = key(peer, partition);
    const first = this.#epochs.get(k);
    if (lease === undefined || (first !== undefined && first !== lease.epoch)) {
      this.#gapped.add(k);
      return false;
    }
    if (first === undefined) this.#epochs.set(k, lease.epoch);
    return true;
  }

  /** Entries of the transfer were not merged. */
  gap(peer: string, partition: number): void {
    this.#gapped.add(key(peer, partition));
  }

  /** The transfer ended (its `done` came): whether it had a gap. */
  end(peer: string, partition: number): boolean {
    const k = key(peer, partition);
    this.#epochs.delete(k);
    return this.#gapped.delete(k);
  }

  /** The partition is no longer held: its transfers are forgotten. */
  dropPartition(partition: number): void {
    const suffix = `|${partition}`;
    for (const k of [...this.#epochs.keys()]) if (k.endsWith(suffix)) this.#epochs.delete(k);
    for (const k of [...this.#gapped]) if (k.endsWith(suffix)) this.#gapped.delete(k);
  }
}

function key(peer: string, partition: number): string {
  return `${peer}|${partition}`;
}
