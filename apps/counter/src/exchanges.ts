import type { Clock, TimerHandle } from "@livecount/runtime";

/**
 * Two DCs that hear each other at once both start a comparison of every partition. When bucket
 * digests from a DC arrive for a partition this node answered with its own buckets this recently,
 * the comparisons crossed: only the DC whose name sorts first drives it.
 */
const CROSSING_MS = 5_000;
/** The DC that left a crossed comparison to the other takes it back if no entries came by then. */
const CROSSING_FALLBACK_MS = 3_000;
/**
 * A transfer this node drives that neither sends nor receives anything for this long is lost (a
 * message dropped on a link coming back, a remote node restarted mid-way): compared again.
 */
const TRANSFER_STALL_MS = 10_000;

/**
 * What anti-entropy remembers about its exchanges with other DCs, per remote DC and partition, so
 * that one exchange runs at a time and a lost one is started again. Nothing here is needed for
 * correctness after a restart: a node that forgot it compares again.
 */
export class Exchanges {
  readonly #clock: Clock;
  /** `remote|partition` -> when this node answered the remote's summary with its bucket digests. */
  readonly #answered = new Map<string, number>();
  /** `remote|partition` -> the timer that takes back a crossed comparison left to the remote. */
  readonly #leftToRemote = new Map<string, TimerHandle>();
  /**
   * `remote|partition` -> the stall timer of a transfer this node drives (its pull sent, the
   * remote's `done` not back yet). Meanwhile the partition is neither driven again with that
   * remote nor offered to it for driving: the transfer in flight brings both to the max.
   */
  readonly #driving = new Map<string, TimerHandle>();
  /**
   * `remote|partition` of exchanges the remote drives (its pull came) whose pages have not all come
   * yet (its `done`): under way, so a follow-up comparison leaves them be. Compared while this node
   * still merges them, they would differ, and be transferred a second time.
   */
  readonly #remoteDriving = new Set<string>();
  /** Per remote DC, the partitions whose exchange with it ended (a `done` came) since it was last heard. */
  readonly #exchanged = new Map<string, Set<number>>();

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** This node answered `remote`'s summary of `partition` with its bucket digests. */
  answered(remote: string, partition: number): void {
    this.#answered.set(key(remote, partition), this.#clock.now());
  }

  /**
   * Bucket digests from `remote` crossed the ones this node sent it and `remote` drives: it must not
   * drive too. `takeBack` drives it after all if `remote`'s entries do not come.
   */
  leftToRemote(remote: string, partition: number, self: string, takeBack: () => void): boolean {
    const k = key(remote, partition);
    const at = this.#answered.get(k);
    if (at === undefined || this.#clock.now() - at >= CROSSING_MS || self < remote) return false;
    if (!this.#leftToRemote.has(k)) {
      const timer = this.#clock.setTimeout(() => {
        this.#leftToRemote.delete(k);
        takeBack();
      }, CROSSING_FALLBACK_MS);
      this.#leftToRemote.set(k, timer);
    }
    return true;
  }

  /** `remote` drives an exchange of `partition` (its pull came): nothing is left to take back. */
  remoteDrives(remote: string, partition: number): void {
    const k = key(remote, partition);
    this.#clear(this.#leftToRemote, k);
    this.#answered.delete(k);
    this.#remoteDriving.add(k);
  }

  isDriving(remote: string, partition: number): boolean {
    return this.#driving.has(key(remote, partition));
  }

  /** A transfer this node drives moved (or starts): its stall timer starts again. */
  progress(remote: string, partition: number, stalled: () => void): void {
    const k = key(remote, partition);
    this.#clear(this.#driving, k);
    const timer = this.#clock.setTimeout(() => {
      if (this.#driving.get(k) !== timer) return;
      this.#driving.delete(k);
      stalled();
    }, TRANSFER_STALL_MS);
    this.#driving.set(k, timer);
  }

  /** `remote`'s `done` for `partition` came: its side of the exchange is merged here. */
  done(remote: string, partition: number): void {
    this.#clear(this.#driving, key(remote, partition));
    this.#remoteDriving.delete(key(remote, partition));
    this.#exchanged.get(remote)?.add(partition);
  }

  /** Held partitions not exchanged with `remote` since it was last heard, and none in flight either way. */
  notExchanged(remote: string, held: Iterable<number>): number[] {
    const exchanged = this.#exchanged.get(remote) ?? new Set<number>();
    return [...held].filter(
      (p) => !exchanged.has(p) && !this.isDriving(remote, p) && !this.#remoteDriving.has(key(remote, p)),
    );
  }

  /** `remote` went down, or was heard again: whatever was in flight with it may be lost. */
  forget(remote: string, heardAgain: boolean): void {
    const prefix = `${remote}|`;
    for (const timers of [this.#driving, this.#leftToRemote]) {
      for (const k of [...timers.keys()]) if (k.startsWith(prefix)) this.#clear(timers, k);
    }
    for (const k of [...this.#answered.keys()]) if (k.startsWith(prefix)) this.#answered.delete(k);
    for (const k of [...this.#remoteDriving]) if (k.startsWith(prefix)) this.#remoteDriving.delete(k);
    if (heardAgain) this.#exchanged.set(remote, new Set());
    else this.#exchanged.delete(remote);
  }

  /** Per remote DC with transfers this node drives in flight, how many partitions they are. */
  inFlight(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const k of this.#driving.keys()) {
      const remote = k.slice(0, k.lastIndexOf("|"));
      out[remote] = (out[remote] ?? 0) + 1;
    }
    return out;
  }

  /** The partition is not held here any more. */
  dropPartition(partition: number): void {
    const suffix = `|${partition}`;
    for (const timers of [this.#driving, this.#leftToRemote]) {
      for (const k of [...timers.keys()]) if (k.endsWith(suffix)) this.#clear(timers, k);
    }
    for (const k of [...this.#remoteDriving]) if (k.endsWith(suffix)) this.#remoteDriving.delete(k);
  }

  /** Forgets answers too old to cross anything. */
  prune(): void {
    const now = this.#clock.now();
    for (const [k, at] of this.#answered) if (now - at >= CROSSING_MS) this.#answered.delete(k);
  }

  clear(): void {
    for (const timers of [this.#driving, this.#leftToRemote]) {
      for (const timer of timers.values()) this.#clock.clearTimeout(timer);
      timers.clear();
    }
    this.#answered.clear();
    this.#remoteDriving.clear();
    this.#exchanged.clear();
  }

  #clear(timers: Map<string, TimerHandle>, k: string): void {
    const timer = timers.get(k);
    if (timer !== undefined) this.#clock.clearTimeout(timer);
    timers.delete(k);
  }
}

function key(remote: string, partition: number): string {
  return `${remote}|${partition}`;
}
