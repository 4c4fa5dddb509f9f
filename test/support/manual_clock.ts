/**
 * A clock that only moves when a test says so: timers fire and deferred work runs inside
 * `advance()`, in time order, so a unit test drives leases, grace windows and flushes without
 * sleeping.
 */
import type { Clock, TimerHandle } from "@livecount/runtime";

export class ManualClock implements Clock {
  /** Time as the timers and `monotonic()` see it. */
  #now: number;
  /** How far the wall clock (`now()`) was stepped away from it (`stepWall`). */
  #wallOffset = 0;
  readonly #timers = new Map<number, { at: number; fn: () => void }>();
  #deferred: Array<() => void> = [];
  #next = 1;

  constructor(start = 1_000_000) {
    this.#now = start;
  }

  now(): number {
    return this.#now + this.#wallOffset;
  }

  monotonic(): number {
    return this.#now;
  }

  /** Steps the wall clock alone by `ms` (negative: back), as NTP or an operator would. */
  stepWall(ms: number): void {
    this.#wallOffset += ms;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const id = this.#next++;
    // Whole milliseconds, as Date.now() reads: a timer of 8000 / 3 ms would otherwise make now()
    // fractional for what it runs, and a timestamp taken then malformed where one must be whole.
    this.#timers.set(id, { at: this.#now + Math.max(0, Math.ceil(ms)), fn });
    return id as unknown as TimerHandle;
  }

  clearTimeout(handle: TimerHandle): void {
    this.#timers.delete(handle as unknown as number);
  }

  defer(fn: () => void): void {
    this.#deferred.push(fn);
  }

  /**
   * Moves time forward without running anything, as if the process had been frozen (SIGSTOP, a long
   * GC): overdue timers fire, late, at the next `advance()`.
   */
  jump(ms: number): void {
    this.#now += ms;
  }

  /**
   * Moves time forward by `ms`, firing every timer due on the way (each at its own time) and running
   * deferred work, and lets the promises they start settle between steps.
   */
  async advance(ms = 0): Promise<void> {
    const end = this.#now + ms;
    for (;;) {
      await settle();
      if (this.#deferred.length > 0) {
        const work = this.#deferred;
        this.#deferred = [];
        for (const fn of work) fn();
        continue;
      }
      const due = this.#earliest(end);
      if (due === undefined) break;
      const [id, timer] = due;
      this.#timers.delete(id);
      this.#now = Math.max(this.#now, timer.at);
      timer.fn();
    }
    // Another advance() running meanwhile may have moved past `end`: time never goes back.
    this.#now = Math.max(this.#now, end);
    await settle();
  }

  #earliest(end: number): [number, { at: number; fn: () => void }] | undefined {
    let best: [number, { at: number; fn: () => void }] | undefined;
    for (const entry of this.#timers) {
      if (entry[1].at > end) continue;
      if (best === undefined || entry[1].at < best[1].at) best = entry;
    }
    return best;
  }
}

/** Lets every promise chain that can make progress without real time do so: one turn of the event loop. */
function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
