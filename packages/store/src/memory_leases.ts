/**
 * The memory store's partition leases (Store.acquire, renew, release) and fence checks: the same
 * rules as the Redis store's lease scripts, judged against the store's clock; and the counter
 * nodes' notes of hearing their bus (Store.noteBusHeard).
 */
import type { AcquireOptions, BusNote, Fence, Lease } from "./store.js";
import { isLive } from "./validate.js";

/** Bus notes older than this are dropped when read (Store.busHeard). */
const BUS_NOTES_KEPT_MS = 3_600_000;

interface LeaseRecord {
  readonly node: string;
  readonly epoch: number;
  expiresAt: number;
}

export class MemoryLeases {
  readonly #leases = new Map<number, LeaseRecord>();
  /** Last epoch handed out per partition; kept after release so epochs are never reused. */
  readonly #epochs = new Map<number, number>();
  /** Store.noteBusHeard: each node's stretch of hearing its bus. */
  readonly #busNotes = new Map<string, BusNote>();

  acquire(
    partition: number,
    node: string,
    ttlMs: number,
    now: number,
    options: AcquireOptions,
  ): Lease | null {
    const held = this.#leases.get(partition);
    if (held !== undefined && isLive(held.expiresAt, now)) {
      if (held.node === node) {
        held.expiresAt = now + ttlMs;
        return { partition, node, epoch: held.epoch, expiresAt: held.expiresAt };
      }
      const { reclaimFrom } = options;
      if (reclaimFrom === undefined || reclaimFrom === "" || !held.node.startsWith(reclaimFrom)) return null;
    }
    const epoch = (this.#epochs.get(partition) ?? 0) + 1;
    this.#epochs.set(partition, epoch);
    this.#leases.set(partition, { node, epoch, expiresAt: now + ttlMs });
    return { partition, node, epoch, expiresAt: now + ttlMs };
  }

  renew(leases: readonly Lease[], ttlMs: number, now: number): Lease[] {
    const renewed: Lease[] = [];
    for (const lease of leases) {
      const held = this.#leases.get(lease.partition);
      // Run out but not taken (a takeover writes a new epoch): still this holder's, so renewed.
      if (held === undefined || held.node !== lease.node || held.epoch !== lease.epoch) continue;
      held.expiresAt = now + ttlMs;
      renewed.push({ ...lease, expiresAt: held.expiresAt });
    }
    return renewed;
  }

  release(lease: Lease): void {
    const held = this.#leases.get(lease.partition);
    if (held !== undefined && held.node === lease.node && held.epoch === lease.epoch) {
      this.#leases.delete(lease.partition);
    }
  }

  noteBusHeard(node: string, continuing: boolean, now: number): void {
    const since = continuing ? Math.min(this.#busNotes.get(node)?.since ?? now, now) : now;
    this.#busNotes.set(node, { since, at: now });
  }

  busHeard(now: number): { now: number; notes: Map<string, BusNote> } {
    for (const [node, note] of this.#busNotes)
      if (note.at < now - BUS_NOTES_KEPT_MS) this.#busNotes.delete(node);
    return { now, notes: new Map(this.#busNotes) };
  }

  /**
   * The fence is current: its partition's lease still carries its epoch and holder. A takeover
   * bumps the epoch and a release removes the lease, so no clock is needed; a lease that ran out and
   * that nobody took still fences its holder, whose renewal would keep it too. The holder is
   * compared as the Redis store compares it (redis_lua.ts), though epochs here are never reissued.
   */
  isCurrent(fence: Fence): boolean {
    const held = this.#leases.get(fence.partition);
    return held !== undefined && held.epoch === fence.epoch && held.node === fence.node;
  }
}
