/**
 * How many connections (WebSockets and event streams) each client address holds here, and in all,
 * against LIVECOUNT_MAX_CONNECTIONS_PER_IP and LIVECOUNT_MAX_CONNECTIONS.
 *
 * A closed socket keeps its address's slot for `holdMs` (the grace window): its viewer keeps
 * counting that long, so an address that closed and reopened sockets as fast as it could would
 * otherwise show far more viewers than the sockets it may hold. With the slot held, what one
 * address shows is at most its cap, however fast it churns. The gateway-wide total counts open
 * connections only: it protects file descriptors, which a closed one no longer holds. An event stream
 * never counts a viewer, so its slot is free as soon as it closes (`released`).
 *
 * The map holds only addresses with an open or held slot; held slots are released in the order
 * they were taken (one FIFO, since every hold is as long), lazily on the next call. It also hands out
 * one string per address (`interned`), for every socket of the address to keep instead of its own.
 */
export type ConnectionRefusal = "per_ip" | "gateway_full";

/** The slots of one address: its key as kept by every socket of it, and how many. */
interface AddressSlots {
  readonly key: string;
  n: number;
}

export class ConnectionLimits {
  readonly #byAddress = new Map<string, AddressSlots>();
  /** Slots of closed sockets, oldest first: released at `until`. */
  readonly #held: Array<{ readonly key: string; readonly until: number }> = [];
  #heldHead = 0;
  #total = 0;

  constructor(
    readonly maxPerAddress: number,
    readonly maxTotal: number,
    readonly holdMs: number,
    /** The monotonic clock: a wall clock stepped back must not hold a closed socket's slot longer. */
    readonly now: () => number,
  ) {}

  /** Why a new connection from `key` must be refused, or undefined when it may open. */
  refusal(key: string): ConnectionRefusal | undefined {
    this.#releaseHeld();
    if (this.#total >= this.maxTotal) return "gateway_full";
    if ((this.#byAddress.get(key)?.n ?? 0) >= this.maxPerAddress) return "per_ip";
    return undefined;
  }

  /** `key`, as the string already held for its address when it holds a slot (else `key` itself). */
  interned(key: string): string {
    return this.#byAddress.get(key)?.key ?? key;
  }

  opened(key: string): void {
    this.#total++;
    const slots = this.#byAddress.get(key);
    if (slots !== undefined) slots.n++;
    else this.#byAddress.set(key, { key, n: 1 });
  }

  /** A socket of `key` closed: its slot is held for `holdMs` (its viewers linger that long). */
  closed(key: string): void {
    if (!this.#byAddress.has(key)) return;
    this.#total--;
    if (this.holdMs > 0) this.#held.push({ key, until: this.now() + this.holdMs });
    else this.#release(key);
  }

  /**
   * A connection of `key` that never counted as a viewer (an event stream) closed: nothing of it
   * lingers, so its slot is free at once.
   */
  released(key: string): void {
    if (!this.#byAddress.has(key)) return;
    this.#total--;
    this.#release(key);
  }

  /** Open connections. */
  get total(): number {
    return this.#total;
  }

  #releaseHeld(): void {
    const now = this.now();
    while (this.#heldHead < this.#held.length && this.#held[this.#heldHead]!.until <= now) {
      this.#release(this.#held[this.#heldHead]!.key);
      this.#heldHead++;
    }
    // Compact once the released prefix is most of the array.
    if (this.#heldHead > 1024 && this.#heldHead * 2 > this.#held.length) {
      this.#held.splice(0, this.#heldHead);
      this.#heldHead = 0;
    }
  }

  #release(key: string): void {
    const slots = this.#byAddress.get(key);
    if (slots === undefined) return;
    if (slots.n > 1) slots.n--;
    else this.#byAddress.delete(key);
  }
}
