import type { Clock, TimerHandle } from "./clock.js";

/**
 * Runs `flush` at most once per `windowMs`, on the leading edge when idle and on the trailing edge
 * when busy: a lone change goes out at once, a burst goes out as one flush per window. A flush that
 * returns a promise is awaited before the next one starts, so flushes never overlap.
 */
export class Coalescer {
  #timer: TimerHandle | undefined;
  #lastStart = -Infinity;
  /** The flush running now, if any. */
  #running: Promise<void> | undefined;
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
    if (this.#running !== undefined || this.#timer !== undefined) return;
    // At most a window: after the wall clock stepped back, the last start looks later than now.
    const wait = Math.min(this.windowMs, Math.max(0, this.#lastStart + this.windowMs - this.clock.now()));
    this.#timer = this.clock.setTimeout(() => {
      this.#timer = undefined;
      void this.#run();
    }, wait);
  }

  /** Flushes now whatever is pending and waits for it (shutdown, handover, tests). */
  async drain(): Promise<void> {
    this.#cancelTimer();
    if (this.#running !== undefined) await this.#running;
    // What the running flush left pending (or asked for again) goes now, not after the window.
    this.#cancelTimer();
    if (this.#pending) await this.#run();
  }

  close(): void {
    this.#closed = true;
    this.#cancelTimer();
  }

  #cancelTimer(): void {
    if (this.#timer !== undefined) this.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #run(): Promise<void> {
    if (this.#running !== undefined) return this.#running;
    if (!this.#pending) return Promise.resolve();
    this.#pending = false;
    this.#lastStart = this.clock.now();
    // `then` runs after this assignment even when the flush returns (or throws) synchronously.
    const running = this.#invoke().then(() => {
      this.#running = undefined;
      // Asked for during the flush: the next one waits for the window.
      if (this.#pending) this.request();
    });
    this.#running = running;
    return running;
  }

  async #invoke(): Promise<void> {
    try {
      await this.flush();
    } catch (err) {
      this.onError(err);
    }
  }
}
