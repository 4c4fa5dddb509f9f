/** Time as a dependency: the actor and the gateway own timers, the pure core never does. */
export interface Clock {
  /** Milliseconds since the epoch, on the wall clock: it may step (NTP, an operator). */
  now(): number;
  /**
   * Milliseconds on a clock that never steps (`performance.now()`), for deadlines of this process
   * alone: a wall clock stepping back must not extend them.
   */
  monotonic(): number;
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
  /**
   * Runs `fn` once the I/O callbacks of the current turn have run (`setImmediate`): work deferred so
   * that everything arriving in the same turn (requests of one socket read) shares one batch.
   */
  defer(fn: () => void): void;
}

export type TimerHandle = { readonly __timer: unique symbol } | ReturnType<typeof setTimeout>;

export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
  setTimeout: (fn, ms) => {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return t;
  },
  clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
  defer: (fn) => {
    setImmediate(fn);
  },
};

/** Resolves after `ms` of `clock` time. */
export function sleep(clock: Clock, ms: number): Promise<void> {
  return new Promise((resolve) => clock.setTimeout(resolve, ms));
}

/** Resolves at the clock's next deferral point: lets a long job give the event loop a turn. */
export function yieldTurn(clock: Clock): Promise<void> {
  return new Promise((resolve) => clock.defer(resolve));
}
