import type { Bus } from "@livecount/bus";
import type { Clock, TimerHandle } from "@livecount/runtime";
import { Gauge, type Registry } from "prom-client";

export interface BusPulseOptions {
  readonly bus: Bus;
  readonly clock: Clock;
  /** How often a round trip goes out (LIVECOUNT_DC_HEARTBEAT_MS). */
  readonly intervalMs: number;
}

/** What a counter node knows of its bus (BusPulse; a harness's stand-in in tests). */
export interface BusHealth {
  /** When the broker last answered. */
  readonly heardAt: number;
  /**
   * When the first round trip still unanswered went out, if one is: failed ones included (NATS
   * down). How long ago is how long the bus has brought nothing, timed from a request that was
   * really sent, so a timer that fired late does not pass for a silent bus.
   */
  readonly unansweredSince: number | undefined;
}

/**
 * Whether the bus carries anything to this process: a round trip to the broker every interval
 * (`Bus.flush`: on NATS a PING its server answers with a PONG), one at a time. A counter node runs
 * without echo, so its own heartbeats never come back to tell it. While NATS is down the round trips
 * fail; while it is frozen (SIGSTOP, a stalled host) the one in flight waits: either way none is
 * answered until the bus carries again.
 */
export class BusPulse implements BusHealth {
  readonly #o: BusPulseOptions;
  #heardAt: number;
  #unansweredSince: number | undefined;
  #inFlight = false;
  #timer: TimerHandle | undefined;

  constructor(options: BusPulseOptions) {
    this.#o = options;
    this.#heardAt = options.clock.now();
  }

  get heardAt(): number {
    return this.#heardAt;
  }

  get unansweredSince(): number | undefined {
    return this.#unansweredSince;
  }

  start(): void {
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
      this.#unansweredSince ??= this.#o.clock.now();
      this.#o.bus
        .flush()
        .then(
          () => {
            this.#heardAt = this.#o.clock.now();
            this.#unansweredSince = undefined;
          },
          () => {},
        )
        .finally(() => (this.#inFlight = false));
    }
    this.#timer = this.#o.clock.setTimeout(() => this.#tick(), this.#o.intervalMs);
  }
}

/** `livecount_counter_bus_unanswered_seconds`: what an operator alerts on (infra/prometheus/alerts.yml). */
export function registerBusPulseMetrics(registry: Registry, pulse: BusHealth, clock: Clock): void {
  new Gauge({
    name: "livecount_counter_bus_unanswered_seconds",
    help: "How long this node's oldest unanswered round trip to its NATS server has waited (0 while NATS answers); past two DC heartbeats the bus counts as silent and gateway leases wait",
    registers: [registry],
    collect() {
      const since = pulse.unansweredSince;
      this.set(since === undefined ? 0 : Math.max(0, clock.now() - since) / 1000);
    },
  });
}
