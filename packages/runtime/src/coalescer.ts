import type { Clock, TimerHandle } from "./clock.js";

/**
 * Runs `flush` at most once per `windowMs`, on the leading edge when idle and on the trailing edge
 * when busy: a lone change goes out at once, a burst goes out as one flush per window. A flush that
 * returns a promise is awaited before the next one starts, so flushes never overlap.
 */
export class Coalescer {
  #timer: TimerHandle | undefined;
  #lastStart = -Infinity;
  #running = false;
  #pending = false;
  #closed = false;

  constructor(
    private readonly clock: Clock,
    private readonly windowMs: number,
    private readonly flush: () => void | Promise<void>,
    private readonly onError: (err: unknown) => void = () => {},
  ) {}

  /** Asks for a flush; coalesced with every other request in the same window. */
  request(): void {
    if (this.#closed) return;
    this.#pending = true;
    if (this.#running || this.#timer !== undefined) return;
    const wait = Math.max(0, this.#lastStart + this.windowMs - this.clock.now());
    this.#timer = this.clock.setTimeout(() => {
      this.#timer = undefined;
      void this.#run();
    }, wait);
  }

  /** Flushes now whatever is pending and waits for it (shutdown, tests). */
  async drain(): Promise<void> {
    if (this.#timer !== undefined) {
      this.clock.clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    while (this.#running) await new Promise((r) => setImmediate(r));
    if (this.#pending) await this.#run();
  }

  close(): void {
    this.#closed = true;
    if (this.#timer !== undefined) this.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  async #run(): Promise<void> {
    if (this.#running || !this.#pending) return;
    this.#running = true;
    this.#pending = false;
    this.#lastStart = this.clock.now();
    try {
      await this.flush();
    } catch (err) {
      this.onError(err);
    } finally {
      this.#running = false;
      if (this.#pending && !this.#closed) {
        this.#pending = false;
        this.request();
      }
    }
  }
}
