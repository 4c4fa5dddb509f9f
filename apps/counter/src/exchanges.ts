import type { Clock, TimerHandle } from "@livecount/runtime";

/**
 * Two DCs that hear each other at once both start a comparison of every partition. When bucket
 * digests from a DC arrive for a partition this node answered with its own buckets this recently,
 * the comparisons crossed: only the DC whose name sorts first drives it.
 */
const CROSSING_MS = 5_000;
/**
 * The DC that left a crossed comparison to the other takes it back if the other's pull has not come
 * by then and nothing else has come from it for as long: while a heal's entries keep coming, the
 * pull may just be waiting behind them here.
 */
const CROSSING_FALLBACK_MS = 3_000;
/**
 * A transfer this node drives that neither sends nor receives anything for this long is lost (a
 * message dropped on a link coming back, a remote node restarted mid-way): compared again.
 */
const TRANSFER_STALL_MS = 10_000;

/**
 * A DC's request to learn a partition (a bootstrap) that comes again while this node still reads its
 * answer to the first is left to that answer: the learner asks again every second until an answer
 * comes, and a node busy answering a new DC's every partition takes seconds to reach each one (it
 * read and offered each partition again for every repeat). An answer not finished within this long
 * (a read that never ends) no longer holds a repeat back.
 */
const TEACH_MS = 3_000;

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
  /** `remote|partition` of a transfer this node drives -> when it started or a message of it last came from `remote`. */
  readonly #drivenHeardAt = new Map<string, number>();
  /**
   * `remote|partition` of exchanges the remote drives (its pull came) whose pages have not all come
   * yet (its `done`) -> when its last message came: under way, so a follow-up comparison leaves them
   * be while they keep coming. Compared while this node still merges them, they would differ, and be
   * transferred a second time. Silent for TRANSFER_STALL_MS, one is taken for lost.
   */
  readonly #remoteDriving = new Map<string, number>();
  /** `remote|partition` -> since when this node reads its answer to `remote`'s request to learn it. */
  readonly #teaching = new Map<string, number>();
  /**
   * `remote|partition` -> when `remote` last asked to learn the partition from this node. It drives
   * that exchange itself; until its `done` comes (or for TRANSFER_STALL_MS, should it never start),
   * this node does not drive one with it.
   */
  readonly #learners = new Map<string, number>();
  /**
   * `remote|partition` where a message came from `remote` while it was still learning the partition
   * itself (AeBuckets.senderLearning), until the next exchange with `remote` for it ends here: that
   * exchange teaches nothing. A mark left over from a lost exchange can make a DC that holds the
   * partition by now look like a learner for one exchange; that exchange still merges every page
   * where the two differed, so this node then holds all the other holds either way.
   */
  readonly #fromLearner = new Set<string>();
  /** Per remote DC, the partitions whose exchange with it ended (a `done` came) since it was last heard. */
  readonly #exchanged = new Map<string, Set<number>>();
  /** Per remote DC, when an anti-entropy message of its last came. */
  readonly #heardAt = new Map<string, number>();
  /** Per remote DC that is down, since when: what made no progress since is lost once it is up. */
  readonly #downAt = new Map<string, number>();

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** This node answered `remote`'s summary of `partition` with its bucket digests. */
  answered(remote: string, partition: number): void {
    this.#answered.set(key(remote, partition), this.#clock.monotonic());
  }

  /**
   * Bucket digests from `remote` crossed the ones this node sent it and `remote` drives: it must not
   * drive too. `takeBack` drives it after all if `remote`'s entries do not come.
   */
  leftToRemote(remote: string, partition: number, self: string, takeBack: () => void): boolean {
    const k = key(remote, partition);
    const at = this.#answered.get(k);
    if (at === undefined || this.#clock.monotonic() - at >= CROSSING_MS || self < remote) return false;
    if (!this.#leftToRemote.has(k)) this.#awaitPull(remote, k, CROSSING_FALLBACK_MS, takeBack);
    return true;
  }

  /** Takes a crossed comparison back after `ms`, unless `remote` was heard within the fallback by then. */
  #awaitPull(remote: string, k: string, ms: number, takeBack: () => void): void {
    const timer = this.#clock.setTimeout(() => {
      if (this.#leftToRemote.get(k) !== timer) return;
      const quietMs = this.#clock.monotonic() - (this.#heardAt.get(remote) ?? -Infinity);
      if (quietMs < CROSSING_FALLBACK_MS) {
        this.#awaitPull(remote, k, CROSSING_FALLBACK_MS - quietMs, takeBack);
        return;
      }
      this.#leftToRemote.delete(k);
      takeBack();
    }, ms);
    this.#leftToRemote.set(k, timer);
  }

  /** An anti-entropy message of `remote` came: it is sending, whatever it is still to send. */
  heard(remote: string): void {
    this.#heardAt.set(remote, this.#clock.monotonic());
  }

  /** `remote` drives an exchange of `partition` (its pull came): nothing is left to take back. */
  remoteDrives(remote: string, partition: number): void {
    const k = key(remote, partition);
    this.#clear(this.#leftToRemote, k);
    this.#answered.delete(k);
    this.#remoteDriving.set(k, this.#clock.monotonic());
  }

  /** Pages of `remote` for `partition` came: an exchange with it either way is still under way. */
  received(remote: string, partition: number): void {
    const k = key(remote, partition);
    const now = this.#clock.monotonic();
    if (this.#remoteDriving.has(k)) this.#remoteDriving.set(k, now);
    if (this.#driving.has(k)) this.#drivenHeardAt.set(k, now);
  }

  isDriving(remote: string, partition: number): boolean {
    return this.#driving.has(key(remote, partition));
  }

  /** A message of an exchange of `partition` came from `remote` while it was still learning it. */
  senderLearning(remote: string, partition: number): void {
    this.#fromLearner.add(key(remote, partition));
  }

  /**
   * The exchange of `partition` with `remote` ended here (its `done` came, or nothing differed): true
   * when a message of it came from `remote` while it was still learning the partition.
   */
  endedWithLearner(remote: string, partition: number): boolean {
    return this.#fromLearner.delete(key(remote, partition));
  }

  /** `remote` asks to learn `partition` from this node (a bootstrap request). */
  learns(remote: string, partition: number): void {
    this.#learners.set(key(remote, partition), this.#clock.monotonic());
  }

  /** `remote` is learning `partition` from this node: it asked within TRANSFER_STALL_MS, and is not done. */
  isLearning(remote: string, partition: number): boolean {
    const at = this.#learners.get(key(remote, partition));
    return at !== undefined && this.#clock.monotonic() - at < TRANSFER_STALL_MS;
  }

  /**
   * `remote` asks to learn `partition` (a bootstrap request): true when this node is to answer it now
   * (it reads its answer from now until `taught`), false while it reads its answer to the same
   * request (TEACH_MS at most).
   */
  teaches(remote: string, partition: number): boolean {
    const k = key(remote, partition);
    const now = this.#clock.monotonic();
    const at = this.#teaching.get(k);
    if (at !== undefined && now - at < TEACH_MS) return false;
    this.#teaching.set(k, now);
    return true;
  }

  /** The answer to `remote`'s request to learn `partition` is sent, or will not be: the next one is answered. */
  taught(remote: string, partition: number): void {
    this.#teaching.delete(key(remote, partition));
  }

  /**
   * A transfer this node drives moved (or starts): its stall timer starts again, and a crossed
   * comparison of the partition left to `remote` is not taken back later (this one covers it).
   */
  progress(remote: string, partition: number, stalled: () => void): void {
    const k = key(remote, partition);
    this.#clear(this.#leftToRemote, k);
    if (!this.#driving.has(k)) this.#drivenHeardAt.set(k, this.#clock.monotonic());
    this.#clear(this.#driving, k);
    const timer = this.#clock.setTimeout(() => {
      if (this.#driving.get(k) !== timer) return;
      this.#stopDriving(k);
      stalled();
    }, TRANSFER_STALL_MS);
    this.#driving.set(k, timer);
  }

  /** A transfer this node was about to drive is not needed (nothing differs) or could not start. */
  stopDriving(remote: string, partition: number): void {
    this.#stopDriving(key(remote, partition));
  }

  #stopDriving(k: string): void {
    this.#clear(this.#driving, k);
    this.#drivenHeardAt.delete(k);
  }

  /** `remote`'s `done` for `partition` came: its side of the exchange is merged here. */
  done(remote: string, partition: number): void {
    this.#stopDriving(key(remote, partition));
    this.#remoteDriving.delete(key(remote, partition));
    this.#learners.delete(key(remote, partition));
    this.#exchanged.get(remote)?.add(partition);
  }

  /** Held partitions not exchanged with `remote` since it was last heard, and none in flight either way. */
  notExchanged(remote: string, held: Iterable<number>): number[] {
    const exchanged = this.#exchanged.get(remote) ?? new Set<number>();
    return [...held].filter(
      (p) => !exchanged.has(p) && !this.isDriving(remote, p) && !this.#remoteUnderWay(key(remote, p)),
    );
  }

  #remoteUnderWay(k: string): boolean {
    const at = this.#remoteDriving.get(k);
    return at !== undefined && this.#clock.monotonic() - at < TRANSFER_STALL_MS;
  }

  /**
   * `remote` went down, came up, or was heard with heartbeats missing (`gap`). Comparisons not
   * started yet are dropped either way, and nothing counts as exchanged with it any more.
   *
   * Transfers in flight are kept while it is down, and judged when it is up: one that a message of
   * `remote` moved since it went down was never cut (its heartbeats waited behind a heal's entries,
   * or its node stalled), and started over it would move every page twice; one that nothing moved
   * was cut with the link, and is compared again at once. A gap says messages were lost: nothing in
   * flight is kept.
   */
  forget(remote: string, kind: "up" | "down" | "gap"): void {
    const prefix = `${remote}|`;
    const now = this.#clock.monotonic();
    for (const k of [...this.#leftToRemote.keys()])
      if (k.startsWith(prefix)) this.#clear(this.#leftToRemote, k);
    for (const k of [...this.#answered.keys()]) if (k.startsWith(prefix)) this.#answered.delete(k);
    for (const k of [...this.#teaching.keys()]) if (k.startsWith(prefix)) this.#teaching.delete(k);
    for (const k of [...this.#learners.keys()]) if (k.startsWith(prefix)) this.#learners.delete(k);
    this.#heardAt.delete(remote);
    if (kind === "down") {
      if (!this.#downAt.has(remote)) this.#downAt.set(remote, now);
      this.#exchanged.delete(remote);
      return;
    }
    const downAt = kind === "gap" ? Infinity : (this.#downAt.get(remote) ?? -Infinity);
    this.#downAt.delete(remote);
    for (const [k, at] of [...this.#drivenHeardAt])
      if (k.startsWith(prefix) && at <= downAt) this.#stopDriving(k);
    for (const [k, at] of [...this.#remoteDriving])
      if (k.startsWith(prefix) && at <= downAt) this.#remoteDriving.delete(k);
    this.#exchanged.set(remote, new Set());
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
    for (const k of [...this.#driving.keys()]) if (k.endsWith(suffix)) this.#stopDriving(k);
    for (const k of [...this.#leftToRemote.keys()])
      if (k.endsWith(suffix)) this.#clear(this.#leftToRemote, k);
    for (const k of [...this.#remoteDriving.keys()]) if (k.endsWith(suffix)) this.#remoteDriving.delete(k);
    for (const k of [...this.#teaching.keys()]) if (k.endsWith(suffix)) this.#teaching.delete(k);
    for (const k of [...this.#learners.keys()]) if (k.endsWith(suffix)) this.#learners.delete(k);
    for (const k of [...this.#fromLearner]) if (k.endsWith(suffix)) this.#fromLearner.delete(k);
  }

  /**
   * Forgets answers too old to cross anything or to hold back a repeated bootstrap request, and
   * exchanges the remote drove that went silent.
   */
  prune(): void {
    const now = this.#clock.monotonic();
    for (const [k, at] of this.#answered) if (now - at >= CROSSING_MS) this.#answered.delete(k);
    for (const [k, at] of this.#teaching) if (now - at >= TEACH_MS) this.#teaching.delete(k);
    for (const [k, at] of this.#learners) if (now - at >= TRANSFER_STALL_MS) this.#learners.delete(k);
    for (const k of [...this.#remoteDriving.keys()])
      if (!this.#remoteUnderWay(k)) this.#remoteDriving.delete(k);
  }

  clear(): void {
    for (const timers of [this.#driving, this.#leftToRemote]) {
      for (const timer of timers.values()) this.#clock.clearTimeout(timer);
      timers.clear();
    }
    this.#answered.clear();
    this.#teaching.clear();
    this.#learners.clear();
    this.#fromLearner.clear();
    this.#remoteDriving.clear();
    this.#exchanged.clear();
    this.#heardAt.clear();
    this.#downAt.clear();
    this.#drivenHeardAt.clear();
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
