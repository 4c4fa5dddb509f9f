import type { Bus } from "@livecount/bus";
import type { Clock, TimerHandle } from "@livecount/runtime";
import { Counter, Gauge, type Registry } from "prom-client";

export interface BusPulseOptions {
  readonly bus: Bus;
  /** Times on its monotonic clock: a wall clock stepping back must not pass for a silent or busy bus. */
  readonly clock: Clock;
  /** How often a round trip goes out (LIVECOUNT_DC_HEARTBEAT_MS). */
  readonly intervalMs: number;
}

/**
 * What a counter node knows of its bus (BusPulse; a harness's stand-in in tests). Times are on the
 * process's monotonic clock (`Clock.monotonic`), as are the leases judged against them.
 */
export interface BusHealth {
  /** When the broker last answered, or last delivered anything to this process. */
  readonly heardAt: number;
  /**
   * When the first round trip still unanswered went out, if one is: failed ones included (NATS
   * down). How long ago is how long the bus has brought nothing, timed from a request that was
   * really sent, so a timer that fired late does not pass for a silent bus.
   */
  readonly unansweredSince: number | undefined;
  /** Something came on the bus: it carries (see BusPulse.delivered). */
  delivered(): void;
}

/** The health of the in-memory bus: it is this process, so it always carries. */
export const IN_PROCESS_BUS: BusHealth = { heardAt: 0, unansweredSince: undefined, delivered: () => {} };

/**
 * DC heartbeat intervals (1 s at the default 250 ms) a round trip may go unanswered, with nothing
 * delivered, while this process's own timers fire on time, before it drops its connection and moves
 * to another server of its NATS cluster (`Bus.reconnect`). On time matters: a process that stalled
 * has not read its socket, and its answers may be waiting there. Past that, its server is stuck
 * while the connection stays open (frozen, or behind a network that drops packets), which no
 * disconnect would ever show, and with several servers in a DC the owners on the others still hear
 * their own: they would drop this gateway's viewers once its lease lapses. A second and a dial, well
 * inside the 10 s gateway lease and the 6 s node lease. With a single server known there is nowhere
 * to go: the process waits for it, as before (the silence guard holds the leases meanwhile).
 */
export const BUS_MOVE_HEARTBEATS = 4;

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
  /** When the next tick is due; a tick later than an interval past it means this process stalled. */
  #dueAt: number | undefined;
  /** Ticks in a row that fired on time: the event loop read its sockets between them. */
  #steadyTicks = 0;
  #moves = 0;

  constructor(options: BusPulseOptions) {
    this.#o = options;
    this.#heardAt = options.clock.monotonic();
  }

  get heardAt(): number {
    return this.#heardAt;
  }

  get unansweredSince(): number | undefined {
    return this.#unansweredSince;
  }

  /** Times this process dropped its connection to a stuck server and dialed again. */
  get moves(): number {
    return this.#moves;
  }

  /**
   * A message came on the bus (a heartbeat, a request): the broker carries, whatever its answer to
   * the round trip in flight is waiting behind. A process too busy to read its answers in time
   * still reads its messages, so a late answer amid traffic is never a silence.
   */
  delivered(): void {
    this.#heardAt = this.#o.clock.monotonic();
  }

  start(): void {
    this.#tick();
  }

  stop(): void {
    if (this.#timer !== undefined) this.#o.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #tick(): void {
    const now = this.#o.clock.monotonic();
    const stalled = this.#dueAt !== undefined && now - this.#dueAt > this.#o.intervalMs;
    this.#steadyTicks = stalled ? 0 : this.#steadyTicks + 1;
    if (this.#stuck(now)) {
      this.#steadyTicks = 0;
      if (this.#o.bus.reconnect()) this.#moves++;
    }
    // One at a time: a frozen broker answers none, and a round trip pending at a disconnect fails.
    if (!this.#inFlight) {
      this.#inFlight = true;
      this.#unansweredSince ??= this.#o.clock.monotonic();
      this.#o.bus
        .flush()
        .then(
          () => {
            this.#heardAt = this.#o.clock.monotonic();
            this.#unansweredSince = undefined;
          },
          () => {},
        )
        .finally(() => (this.#inFlight = false));
    }
    this.#dueAt = now + this.#o.intervalMs;
    this.#timer = this.#o.clock.setTimeout(() => this.#tick(), this.#o.intervalMs);
  }

  /** See BUS_MOVE_HEARTBEATS. Only a connected bus moves: a reconnecting one is dialing already. */
  #stuck(now: number): boolean {
    const since = this.#unansweredSince;
    const moveMs = BUS_MOVE_HEARTBEATS * this.#o.intervalMs;
    return (
      since !== undefined &&
      now - since >= moveMs &&
      now - this.#heardAt >= moveMs &&
      this.#steadyTicks > BUS_MOVE_HEARTBEATS &&
      this.#o.bus.status === "connected"
    );
  }
}

/** `<prefix>_bus_unanswered_seconds`: what an operator alerts on (infra/prometheus/alerts.yml). */
export function registerBusPulseMetrics(
  registry: Registry,
  prefix: string,
  pulse: BusPulse,
  clock: Clock,
): void {
  new Gauge({
    name: `${prefix}_bus_unanswered_seconds`,
    help: "How long this process's oldest unanswered round trip to its NATS server has waited (0 while NATS answers); past two DC heartbeats the bus counts as silent: gateway and DC leases wait",
    registers: [registry],
    collect() {
      const since = pulse.unansweredSince;
      this.set(since === undefined ? 0 : Math.max(0, clock.monotonic() - since) / 1000);
    },
  });
  let counted = 0;
  new Counter({
    name: `${prefix}_bus_moves_total`,
    help: "Times this process left a NATS server that answered nothing for four DC heartbeats while the connection stayed open, for another server of its cluster",
    registers: [registry],
    collect() {
      this.inc(pulse.moves - counted);
      counted = pulse.moves;
    },
  });
}

/**
 * DC heartbeat intervals a round trip may go unanswered (timed from when it went out) before the
 * bus counts as silent. Only a process too busy to read the answer for that long mistakes itself
 * for a silent bus, and that only moves the leases by as long. A silence is noticed at most one
 * more interval and a sweep later: about 1 s at the defaults (250 ms), where a gateway lease of
 * 10 s, whose gateway beat up to a third of it before the outage, lapses 6.7 s into it at the
 * earliest, and a DC lease of 15 s 10 s into it.
 */
export const BUS_SILENCE_HEARTBEATS = 2;

/** What judging the bus found: it carries, it is silent (since `from`), or a silence just ended. */
export type BusState =
  | { readonly state: "carries" }
  | { readonly state: "silent"; readonly from: number; readonly began: boolean }
  | { readonly state: "ended"; readonly from: number; readonly to: number };

/**
 * Silences of the bus, judged from the broker's answers: one begins once a round trip has gone
 * unanswered for `silenceMs` and nothing at all came for as long, counted from the last thing that
 * came; it ends, from then to the next thing that comes (an answer or a message). Leases
 * (gateways', DCs') do not lapse during a silence, and get back the part of it after they were last
 * renewed when it ends.
 */
export class BusSilence {
  readonly #health: BusHealth;
  readonly #silenceMs: number;
  #from: number | undefined;

  constructor(health: BusHealth, silenceMs: number) {
    this.#health = health;
    this.#silenceMs = silenceMs;
  }

  get silent(): boolean {
    return this.#from !== undefined;
  }

  /**
   * `now` on the monotonic clock, as the health's times are. `notBefore`: a silence is not counted
   * from before it (a stall of the process already compensated).
   */
  judge(now: number, notBefore = -Infinity): BusState {
    const { heardAt, unansweredSince } = this.#health;
    if (this.#from === undefined) {
      const overdue = unansweredSince !== undefined && now - unansweredSince > this.#silenceMs;
      if (!overdue || now - heardAt <= this.#silenceMs) return CARRIES;
      this.#from = Math.max(heardAt, notBefore);
      return { state: "silent", from: this.#from, began: true };
    }
    if (heardAt <= this.#from) return { state: "silent", from: this.#from, began: false };
    const from = this.#from;
    this.#from = undefined;
    return { state: "ended", from, to: heardAt };
  }
}

const CARRIES: BusState = { state: "carries" };

/**
 * Where a lease last renewed at `renewedAt` runs from once the time from `from` to `to` (a silence
 * of the bus, a stall of the process) no longer counts against it: it gets back the part after it
 * was renewed, and one renewed since `to` gets nothing.
 */
export function leaseFromAfterSilence(renewedAt: number, from: number, to: number): number {
  return renewedAt + Math.max(0, to - Math.max(renewedAt, from));
}
