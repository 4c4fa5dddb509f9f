/**
 * Retry delays with full jitter (AWS architecture blog, "Exponential Backoff and Jitter"): the n-th
 * retry (from 0) waits random(0, min(maxMs, baseMs * 2^n)). Many gateways that failed together (a
 * counter node restarted) spread their retries instead of hitting the new owner in lockstep.
 */
export function fullJitterMs(retry: number, baseMs: number, maxMs: number, random = Math.random): number {
  return Math.floor(random() * Math.min(maxMs, baseMs * 2 ** Math.min(retry, 30)));
}

/** The retry state of one thing that is retried (a queue, a snapshot): its delays grow until `reset()`. */
export class Backoff {
  #retries = 0;

  constructor(
    private readonly baseMs: number,
    private readonly maxMs: number,
    private readonly random: () => number = Math.random,
  ) {}

  /** The delay before the next retry; each call counts one more retry. */
  next(): number {
    return fullJitterMs(this.#retries++, this.baseMs, this.maxMs, this.random);
  }

  /** A try succeeded (or the target changed): the next failure starts small again. */
  reset(): void {
    this.#retries = 0;
  }
}
