import { PartialWriteError, type Fence, type Lease, type Store } from "@livecount/store";
import { LogThrottle, type Clock, type Logger, type TimerHandle } from "@livecount/runtime";

export interface OwnershipOptions {
  readonly store: Store;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly node: string;
  /**
   * Holders whose id starts with this are earlier incarnations of this process (a restart under the
   * same node id): their live leases are taken at once, with a new epoch, instead of waited out.
   * Only for the first lease after `start()`: a holder under the node id found later is a later
   * process that replaced this one while it was frozen (it takes over as this one did), which
   * keeps what it holds. A predecessor's lease not taken by then runs out within a lease anyway.
   */
  readonly reclaimFrom?: string;
  /** Lease length; renewed every third of it. */
  readonly leaseMs: number;
  /** Retry period for partitions still held by a previous owner. */
  readonly retryMs: number;
  /**
   * Whether partitions not held may be taken now (default: always). A node that hears nothing on
   * its bus takes none: no gateway's presence could reach it, so it would count every viewer of the
   * partition gone once the settle window ends. Wanted ones are tried again every `retryMs`. The
   * counter node's rule: its bus heard within twice the silence threshold, so an answer late amid
   * load defers no takeover.
   */
  readonly mayAcquire?: () => boolean;
}

/** Why a partition stopped being ours. */
export type LossReason = "released" | "lost";

/**
 * The partitions this node owns, each as a lease with a fencing epoch in the store. The ring says
 * which partitions the node should own; a partition is served only once its lease is held, so a
 * paused or partitioned former owner cannot write after losing it: its fence is stale.
 */
export class PartitionOwnership {
  readonly #opts: OwnershipOptions;
  readonly #held = new Map<number, Lease>();
  /**
   * Per held partition, until when (this process's monotonic clock) the lease is surely still ours:
   * the lease length from when its acquire or last renew was sent. Monotonic: a wall clock stepping
   * back while renewals fail must not keep a partition served past its lease. Past it (the process was paused, or the
   * store did not answer renewals) another node may own the partition, so it is not served.
   */
  readonly #validUntil = new Map<number, number>();
  /** Releases under way, by partition. */
  readonly #releasing = new Map<number, Promise<void>>();
  readonly #wanted = new Set<number>();
  /** Until when (monotonic) a predecessor's leases are reclaimed (OwnershipOptions.reclaimFrom). */
  #reclaimUntil = 0;
  /** A cycle repeats every few hundred ms while a partition cannot be had: its line is throttled. */
  readonly #logs = new LogThrottle();
  readonly #waiters = new Map<number, Array<(fence: Fence | undefined) => void>>();
  #onLost: (partition: number, reason: LossReason) => Promise<void> | void = () => {};
  #onAcquired: (partition: number) => void = () => {};
  #timer: TimerHandle | undefined;
  #acquiring = false;
  #closed = false;

  constructor(opts: OwnershipOptions) {
    this.#opts = opts;
  }

  /** Called before a partition is released or after its lease was found lost. */
  onLoss(handler: (partition: number, reason: LossReason) => Promise<void> | void): void {
    this.#onLost = handler;
  }

  /** Called when a partition's lease is taken. */
  onAcquire(handler: (partition: number) => void): void {
    this.#onAcquired = handler;
  }

  fenceOf(partition: number): Fence | undefined {
    const validUntil = this.#validUntil.get(partition);
    return validUntil !== undefined && this.#opts.clock.monotonic() < validUntil
      ? this.#held.get(partition)
      : undefined;
  }

  /**
   * The partition's lease as this node holds it, also while it has run out here (fenceOf says
   * undefined then). Only for writes the store fences itself: a lease another node took is refused
   * there (its epoch changed), and one that ran out untaken is still this node's.
   */
  leaseOf(partition: number): Fence | undefined {
    return this.#held.get(partition);
  }

  get heldCount(): number {
    return this.#held.size;
  }

  /** The partitions whose lease this node holds, with their epochs, in partition order. */
  held(): Array<[partition: number, epoch: number]> {
    return [...this.#held.values()]
      .map((l): [number, number] => [l.partition, l.epoch])
      .sort((a, b) => a[0] - b[0]);
  }

  /**
   * A write under `fence` was refused as stale: another node took the partition. Lost, if that is
   * still the lease held; one taken again since (a new epoch) stays, for the write was of an earlier
   * tenure, in flight as the lease was lost and taken back.
   */
  refused(fence: Fence): void {
    const held = this.#held.get(fence.partition);
    if (held === undefined || held.epoch !== fence.epoch || held.node !== fence.node) return;
    this.#held.delete(fence.partition);
    this.#validUntil.delete(fence.partition);
    this.#opts.logger.warn({ partition: fence.partition, epoch: fence.epoch }, "partition lease lost");
    void this.#onLost(fence.partition, "lost");
  }

  /** Resolves with the fence once the partition is held, or undefined if it stops being wanted or time runs out. */
  whenHeld(partition: number, timeoutMs: number): Promise<Fence | undefined> {
    const held = this.fenceOf(partition);
    if (held !== undefined) return Promise.resolve(held);
    if (!this.#wanted.has(partition)) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const timer = this.#opts.clock.setTimeout(() => settle(undefined), timeoutMs);
      const settle = (fence: Fence | undefined): void => {
        this.#opts.clock.clearTimeout(timer);
        const list = this.#waiters.get(partition);
        if (list !== undefined) {
          const i = list.indexOf(settle);
          if (i >= 0) list.splice(i, 1);
        }
        resolve(fence);
      };
      const list = this.#waiters.get(partition) ?? [];
      list.push(settle);
      this.#waiters.set(partition, list);
    });
  }

  /** Sets the partitions the ring assigns to this node: acquires new ones, hands over the others. */
  async setWanted(partitions: Iterable<number>): Promise<void> {
    const next = new Set(partitions);
    for (const p of this.#wanted) if (!next.has(p)) this.#wanted.delete(p);
    for (const p of next) this.#wanted.add(p);
    for (const [p] of this.#waiters) if (!next.has(p)) this.#notify(p, undefined);
    await Promise.all([...this.#held.keys()].filter((p) => !next.has(p)).map((p) => this.#release(p)));
    await this.#acquireWanted();
  }

  start(): void {
    this.#reclaimUntil = this.#opts.clock.monotonic() + this.#opts.leaseMs;
    this.#schedule(0);
  }

  /** Releases every lease (after the loss handler flushed each partition). */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) this.#opts.clock.clearTimeout(this.#timer);
    this.#wanted.clear();
    await Promise.all([...this.#held.keys()].map((p) => this.#release(p)));
  }

  /**
   * Stops renewing and acquiring, releasing nothing: the leases were taken by a later process under
   * this node id (CounterNode, superseded), and a release would at best do nothing.
   */
  abandon(): void {
    this.#closed = true;
    if (this.#timer !== undefined) this.#opts.clock.clearTimeout(this.#timer);
    this.#wanted.clear();
    this.#held.clear();
    this.#validUntil.clear();
    for (const p of [...this.#waiters.keys()]) this.#notify(p, undefined);
  }

  #schedule(ms: number): void {
    if (this.#closed) return;
    if (this.#timer !== undefined) this.#opts.clock.clearTimeout(this.#timer);
    this.#timer = this.#opts.clock.setTimeout(() => void this.#cycle(), ms);
  }

  /**
   * The next cycle is due a third of a lease after this one *started*, not after it ended: a
   * renewal that waited long for the store (a busy Redis runs long flush scripts ahead of it) must
   * not push the next one later by as much, or two slow round trips in a row outlast the lease.
   * A renewal that could not be tried is tried again after `retryMs`.
   */
  async #cycle(): Promise<void> {
    const started = this.#opts.clock.monotonic();
    let retry = false;
    try {
      retry = await this.#renew();
      await this.#acquireWanted();
    } catch (err) {
      retry = true;
      const suppressed = this.#logs.admit("cycle");
      if (suppressed !== undefined)
        this.#opts.logger.error({ err, suppressed }, "partition lease cycle failed");
    }
    const { retryMs, leaseMs } = this.#opts;
    const pending = retry || [...this.#wanted].some((p) => !this.#held.has(p));
    const due = pending ? Math.min(retryMs, leaseMs / 3) : leaseMs / 3;
    this.#schedule(Math.max(0, started + due - this.#opts.clock.monotonic()));
  }

  /** Renews every held lease; true if some could not be tried (the store failed for them). */
  async #renew(): Promise<boolean> {
    if (this.#held.size === 0) return false;
    const leases = [...this.#held.values()];
    const validUntil = this.#opts.clock.monotonic() + this.#opts.leaseMs;
    let kept: Lease[];
    // Leases whose renewal could not be tried (their part of the store failed): neither renewed
    // nor lost; they run out at their time unless a later cycle renews them.
    let untried = new Set<number>();
    try {
      kept = await this.#opts.store.renew(leases, this.#opts.leaseMs);
    } catch (err) {
      if (!(err instanceof PartialWriteError)) throw err;
      kept = err.result as Lease[];
      untried = new Set(err.failed.map((f) => f.partition));
      const suppressed = this.#logs.admit("renew");
      if (suppressed !== undefined)
        this.#opts.logger.warn(
          { err, partitions: untried.size, suppressed },
          "some leases could not be renewed",
        );
    }
    const keptBy = new Map(kept.map((l) => [l.partition, l]));
    const sentAt = validUntil - this.#opts.leaseMs;
    /** Renewed although they had run out when the renewal went out (nobody took them meanwhile). */
    let late = 0;
    for (const lease of leases) {
      if (untried.has(lease.partition)) continue;
      const renewed = keptBy.get(lease.partition);
      if (renewed !== undefined) {
        // A lease released meanwhile must not come back.
        if (this.#held.has(lease.partition)) {
          const before = this.#validUntil.get(lease.partition) ?? 0;
          if (before <= sentAt) late++;
          this.#held.set(lease.partition, renewed);
          this.#validUntil.set(lease.partition, validUntil);
          // Requests that came while it had run out here wait for it (whenHeld): it is back.
          const now = this.#opts.clock.monotonic();
          if (before <= now && now < validUntil) this.#notify(lease.partition, renewed);
        }
        continue;
      }
      if (this.#held.get(lease.partition) !== lease) continue;
      this.#held.delete(lease.partition);
      this.#validUntil.delete(lease.partition);
      this.#opts.logger.warn({ partition: lease.partition, epoch: lease.epoch }, "partition lease lost");
      await this.#onLost(lease.partition, "lost");
    }
    if (late > 0) this.#opts.logger.warn({ partitions: late }, "partition leases renewed after they ran out");
    return untried.size > 0;
  }

  async #acquireWanted(): Promise<void> {
    if (this.#acquiring || this.#closed) return;
    if (this.#opts.mayAcquire?.() === false) {
      if ([...this.#wanted].some((p) => !this.#held.has(p))) this.#schedule(this.#opts.retryMs);
      return;
    }
    this.#acquiring = true;
    try {
      const missing = [...this.#wanted].filter((p) => !this.#held.has(p));
      const validUntil = this.#opts.clock.monotonic() + this.#opts.leaseMs;
      // Each on its own: on Redis Cluster one shard failing leaves the others' partitions to take.
      const settled = await Promise.allSettled(
        missing.map((p) =>
          this.#opts.store.acquire(
            p,
            this.#opts.node,
            this.#opts.leaseMs,
            this.#opts.clock.monotonic() < this.#reclaimUntil ? { reclaimFrom: this.#opts.reclaimFrom } : {},
          ),
        ),
      );
      const leases = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
      const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
      for (const lease of leases) {
        if (lease === null) continue;
        if (!this.#wanted.has(lease.partition)) {
          await this.#opts.store.release(lease);
          continue;
        }
        this.#held.set(lease.partition, lease);
        this.#validUntil.set(lease.partition, validUntil);
        this.#onAcquired(lease.partition);
        this.#notify(lease.partition, lease);
      }
      if (leases.some((l) => l === null)) this.#schedule(this.#opts.retryMs);
      if (failed !== undefined) throw failed.reason;
    } finally {
      this.#acquiring = false;
    }
  }

  /**
   * Flushes the partition (the loss handler) and releases its lease, once: a release asked for
   * while one of the same partition is under way (a shutdown during a hand-over) waits for it.
   */
  #release(partition: number): Promise<void> {
    let releasing = this.#releasing.get(partition);
    if (releasing === undefined) {
      releasing = this.#releaseOnce(partition).finally(() => this.#releasing.delete(partition));
      this.#releasing.set(partition, releasing);
    }
    return releasing;
  }

  async #releaseOnce(partition: number): Promise<void> {
    const lease = this.#held.get(partition);
    if (lease === undefined) return;
    await this.#onLost(partition, "released");
    this.#held.delete(partition);
    this.#validUntil.delete(partition);
    try {
      await this.#opts.store.release(lease);
    } catch (err) {
      this.#opts.logger.warn({ err, partition }, "partition release failed; the lease will expire");
    }
  }

  #notify(partition: number, fence: Fence | undefined): void {
    const list = this.#waiters.get(partition);
    if (list === undefined) return;
    this.#waiters.delete(partition);
    for (const settle of [...list]) settle(fence);
  }
}
