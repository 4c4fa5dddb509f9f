import { takeTokensAt, type BucketFullAt, type BucketLimits, type Clock } from "@livecount/runtime";

/**
 * Every socket's frame rate limit (LIVECOUNT_SOCKET_RATE / _BURST), each socket's bucket held in one
 * number of its own (`SocketData.rateFullAt`). The bucket counts whole tokens since the budget was
 * made, rounded down: a small integer V8 keeps in the socket's field itself (for three years at 20 a
 * second), where a fraction or an epoch-sized number is a 16-byte heap number per socket. Rounding
 * down lets a socket send at most one frame more than the exact bucket would.
 */
export class FrameBudget {
  readonly #limits: BucketLimits;
  readonly #clock: Clock;
  /**
   * When the budget was made (epoch-ms), moved back by every step back of the wall clock: the
   * buckets count tokens from here, on a time that never runs backwards. Otherwise a step back of
   * a minute would leave every socket's bucket a minute in the future, refusing every frame.
   */
  #from: number;
  /** The wall clock's latest reading. */
  #last: number;

  constructor(limits: BucketLimits, clock: Clock) {
    this.#limits = limits;
    this.#clock = clock;
    this.#from = this.#last = clock.now();
  }

  /** Whether the bucket `fullAt` was full at the last `take` (`fullAt` counts tokens, as `take` does). */
  wasFull(fullAt: BucketFullAt): boolean {
    return fullAt <= ((this.#last - this.#from) / 1000) * this.#limits.ratePerS;
  }

  /** Takes a frame's token from the bucket `fullAt`: its new value, or undefined when it is empty. */
  take(fullAt: BucketFullAt): BucketFullAt | undefined {
    const now = this.#clock.now();
    if (now < this.#last) this.#from -= this.#last - now;
    this.#last = now;
    const next = takeTokensAt(fullAt, 1, this.#limits, now - this.#from);
    return next === undefined ? undefined : Math.floor(next);
  }
}
