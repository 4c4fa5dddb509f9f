/**
 * How many sockets each client address holds here, and in all, against LIVECOUNT_MAX_CONNECTIONS_PER_IP
 * and LIVECOUNT_MAX_CONNECTIONS. The map holds only addresses with an open socket, so it is bounded
 * by the gateway-wide cap.
 */
export type ConnectionRefusal = "per_ip" | "gateway_full";

export class ConnectionLimits {
  readonly #byAddress = new Map<string, number>();
  #total = 0;

  constructor(
    readonly maxPerAddress: number,
    readonly maxTotal: number,
  ) {}

  /** Why a new socket from `key` must be refused, or undefined when it may open. */
  refusal(key: string): ConnectionRefusal | undefined {
    if (this.#total >= this.maxTotal) return "gateway_full";
    if ((this.#byAddress.get(key) ?? 0) >= this.maxPerAddress) return "per_ip";
    return undefined;
  }

  opened(key: string): void {
    this.#total++;
    this.#byAddress.set(key, (this.#byAddress.get(key) ?? 0) + 1);
  }

  closed(key: string): void {
    const n = this.#byAddress.get(key);
    if (n === undefined) return;
    this.#total--;
    if (n > 1) this.#byAddress.set(key, n - 1);
    else this.#byAddress.delete(key);
  }

  get total(): number {
    return this.#total;
  }
}
