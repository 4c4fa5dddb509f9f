/**
 * How long a keys message waits for its acknowledgement before it goes again (HeldKeys): `ackWaitMs`,
 * or longer while acknowledgements take longer, as TCP times its retransmissions (RFC 6298): the
 * smoothed time they took and four times its mean deviation. A receiving node's import queue holds
 * acknowledgements up under load, and a resend sooner than they come only sends a copy. Measured only
 * on messages sent once (Karn's rule: an acknowledgement of one sent again may answer either send).
 */
export class AckWait {
  /** The longest wait for an acknowledgement, in `ackWaitMs`. */
  static readonly MAX_BACKOFF = 16;
  readonly #ackWaitMs: number;
  #smoothedMs: number | undefined;
  #deviationMs = 0;

  constructor(ackWaitMs: number) {
    this.#ackWaitMs = ackWaitMs;
  }

  /** An acknowledgement of a message sent once came `ms` after it was sent. */
  took(ms: number): void {
    if (this.#smoothedMs === undefined) {
      this.#smoothedMs = ms;
      this.#deviationMs = ms / 2;
      return;
    }
    this.#deviationMs += (Math.abs(this.#smoothedMs - ms) - this.#deviationMs) / 4;
    this.#smoothedMs += (ms - this.#smoothedMs) / 8;
  }

  /** The first wait: `ackWaitMs`, or what acknowledgements take when longer, up to MAX_BACKOFF times it. */
  get firstMs(): number {
    const base = this.#ackWaitMs;
    if (this.#smoothedMs === undefined) return base;
    return Math.min(AckWait.MAX_BACKOFF * base, Math.max(base, this.#smoothedMs + 4 * this.#deviationMs));
  }

  /**
   * The wait before try `tries` + 1: doubling from the first, up to MAX_BACKOFF times `ackWaitMs`,
   * without the jitter of the runtime's `fullJitterMs` (its waits start at 0).
   */
  afterTries(tries: number): number {
    return Math.min(AckWait.MAX_BACKOFF * this.#ackWaitMs, this.firstMs * 2 ** (tries - 1));
  }
}
