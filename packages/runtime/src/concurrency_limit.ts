/**
 * Runs async tasks at most `limit` at a time, in the order they were given: the rest wait their
 * turn. For calls whose answers time out when too many queue at once behind a single-threaded
 * server (Redis runs one script at a time, and a client's command timeout counts from the send).
 */
export class ConcurrencyLimit {
  readonly #limit: number;
  #running = 0;
  readonly #waiting: Array<() => void> = [];

  constructor(limit: number) {
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError(`limit must be a positive integer, got ${limit}`);
    this.#limit = limit;
  }

  /** Tasks started and not settled. */
  get running(): number {
    return this.#running;
  }

  /** Tasks waiting for a turn. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /** Runs `task` once fewer than `limit` others run; settles as it does. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.#running >= this.#limit) await new Promise<void>((start) => this.#waiting.push(start));
    else this.#running++;
    try {
      return await task();
    } finally {
      // The turn passes straight to the next waiter: #running counts it already.
      const next = this.#waiting.shift();
      if (next !== undefined) next();
      else this.#running--;
    }
  }
}
