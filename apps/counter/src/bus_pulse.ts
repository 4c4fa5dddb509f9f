import type { Bus } from "@livecount/bus";
import type { Clock, TimerHandle } from "@livecount/runtime";

export interface BusPulseOptions {
  readonly bus: Bus;
  readonly clock: Clock;
  /** How often a round trip goes out (LIVECOUNT_DC_HEARTBEAT_MS). */
  readonly intervalMs: number;
}

/**
 * Whether the bus carries anything to this process: a round trip to the broker every interval
 * (`Bus.flush`: on NATS a PING its server answers with a PONG), one at a time. A counter node runs
 * without echo, so its own heartbeats never come back to tell it. While NATS is down the round trip
 * fails; while it is frozen (SIGSTOP, a stalled host) it waits: either way `heardAt` stays where it
 * was, and the silence shows as its age.
 */
export class BusPulse {
  readonly #o: BusPulseOptions;
  #heardAt = -Infinity;
  #inFlight = false;
  #timer: TimerHandle | undefined;

  constructor(options: BusPulseOptions) {
    this.#o = options;
  }

  /** When the broker last answered a round trip (the start counts as heard). */
  get heardAt(): number {
    return this.#heardAt;
  }

  start(): void {
    this.#heardAt = this.#o.clock.now();
    this.#tick();
  }

  stop(): void {
    if (this.#timer !== undefined) this.#o.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #tick(): void {
    // One at a time: a frozen broker answers none, and a round trip pending at a disconnect fails.
    if (!this.#inFlight) {
      this.#inFlight = true;
      this.#o.bus
        .flush()
        .then(
          () => void (this.#heardAt = this.#o.clock.now()),
          () => {},
        )
        .finally(() => (this.#inFlight = false));
    }
    this.#timer = this.#o.clock.setTimeout(() => this.#tick(), this.#o.intervalMs);
  }
}
