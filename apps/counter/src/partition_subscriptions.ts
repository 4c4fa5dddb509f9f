import type { Bus, Subscription } from "@livecount/bus";

/**
 * One bus subscription per partition this node holds, to a subject of the partition's own: other
 * DCs' page entries (Replication), their idempotency keys (KeyReplication).
 */
export class PartitionSubscriptions {
  readonly #subs = new Map<number, Subscription>();

  constructor(
    private readonly bus: Bus,
    private readonly subjectOf: (partition: number) => string,
    private readonly received: (partition: number, data: Uint8Array, subject: string) => void,
  ) {}

  held(partition: number): void {
    if (this.#subs.has(partition)) return;
    const sub = this.bus.subscribe(this.subjectOf(partition), (data, subject) =>
      this.received(partition, data, subject),
    );
    this.#subs.set(partition, sub);
  }

  dropped(partition: number): void {
    this.#subs.get(partition)?.unsubscribe();
    this.#subs.delete(partition);
  }

  stop(): void {
    for (const sub of this.#subs.values()) sub.unsubscribe();
    this.#subs.clear();
  }
}
