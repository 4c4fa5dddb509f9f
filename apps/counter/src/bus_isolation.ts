import type { BusHealth } from "@livecount/cluster";
import { LogThrottle, type Clock, type Logger, type TimerHandle } from "@livecount/runtime";
import type { Store } from "@livecount/store";
import { Counter, Gauge, type Registry } from "prom-client";

export interface BusIsolationOptions {
  readonly store: Pick<Store, "noteBusHeard" | "busHeard">;
  readonly clock: Clock;
  readonly logger: Logger;
  /** This counter node's id (the notes are by node id, as the ring is). */
  readonly node: string;
  readonly health: BusHealth;
  /** LIVECOUNT_NODE_LEASE_MS: how long the others keep a silent node on their rings. */
  readonly nodeLeaseMs: number;
  /** Called with true when this node finds itself cut off alone, with false once its bus carries again. */
  readonly onChange: (isolated: boolean) => void;
}

/** Notes and checks go this many times per node lease. */
const CHECKS_PER_LEASE = 6;
/**
 * How long, in node leases, another node must have heard its bus without a break while this one
 * heard nothing, to prove that the bus carries and this node is the one cut off. Past the time
 * between two notes (a sixth of a lease) and the skew of two clocks that leases tolerate.
 */
const PROOF_LEASES = 0.5;
/**
 * The proof's floor, in ms: as NATS comes back after an outage, every node reconnects on its own
 * timer (the bus retries every 500 ms, a crowd of clients may wait longer on a restarted server),
 * and the first back must not pass for proof to the last.
 */
const MIN_PROOF_MS = 2000;

/**
 * A counter node cut off the bus while the other nodes of its DC still hear it: they and the
 * gateways forget it after the node lease, yet it keeps its partitions, whose leases it still renews
 * in Redis, so nobody can take them. Every page it owns would stay unavailable, and show what it
 * last published, for as long as the cut lasts.
 *
 * Silence alone cannot tell a cut-off node from a NATS outage, where every node hears nothing and
 * keeping the partitions is right (nobody could serve them better, and handing them around would
 * only churn). Redis tells them apart: every node notes in the store since when it has heard its
 * bus without a break, and until when (`Store.noteBusHeard`, a sixth of a node lease apart), and a
 * node that has heard nothing for a node lease reads the others' notes. One heard the bus recently,
 * without a break for half a lease (2 s at least) while this node heard nothing: the bus carries,
 * and this node is the one cut off. Nodes coming back from an outage one after another are no
 * proof to each other: the first back has not heard the bus for that long. It hands every
 * partition over (flushed, then released: the nodes that still hear the bus take them and the
 * gateways resync them there), and takes them back through the ring once its bus carries again.
 */
export class BusIsolation {
  readonly #o: BusIsolationOptions;
  readonly #intervalMs: number;
  readonly #logs = new LogThrottle();
  /** When this node last heard its bus as noted in the store. */
  #noted = -Infinity;
  /** Since when this node has heard its bus without a break (undefined: it has not, as of the last step). */
  #hearingSince: number | undefined;
  /** When this node last read the others' notes while it heard nothing. */
  #checkedAt = -Infinity;
  #busy = false;
  /** While cut off: when its bus was last heard before. */
  #isolatedFrom: number | undefined;
  #isolations = 0;
  #timer: TimerHandle | undefined;

  readonly #proofMs: number;

  constructor(options: BusIsolationOptions) {
    this.#o = options;
    this.#intervalMs = Math.max(1, Math.floor(options.nodeLeaseMs / CHECKS_PER_LEASE));
    this.#proofMs = Math.max(MIN_PROOF_MS, PROOF_LEASES * options.nodeLeaseMs);
  }

  get isolated(): boolean {
    return this.#isolatedFrom !== undefined;
  }

  /** Times this node found itself cut off alone. */
  get isolations(): number {
    return this.#isolations;
  }

  start(): void {
    this.#timer = this.#o.clock.setTimeout(() => {
      void this.tick();
      this.start();
    }, this.#intervalMs);
  }

  stop(): void {
    if (this.#timer !== undefined) this.#o.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** One step: note a hearing, leave an isolation the bus ended, or look for proof of one. */
  async tick(): Promise<void> {
    if (this.#busy) return;
    this.#busy = true;
    try {
      await this.#step(this.#o.clock.now(), this.#o.health.heardAt);
    } catch (err) {
      const suppressed = this.#logs.admit("store");
      if (suppressed !== undefined)
        this.#o.logger.warn({ err, suppressed }, "bus notes unreadable or unwritten; trying again");
    } finally {
      this.#busy = false;
    }
  }

  async #step(now: number, heardAt: number): Promise<void> {
    const { nodeLeaseMs, node } = this.#o;
    if (this.#isolatedFrom !== undefined && heardAt > this.#isolatedFrom) {
      this.#isolatedFrom = undefined;
      this.#o.logger.warn("the bus carries again; taking partitions back through the ring");
      this.#o.onChange(false);
    }
    // Nothing heard for two steps breaks a stretch of hearing (a round trip answered late amid
    // load does not); the next hearing starts one.
    if (now - heardAt > 2 * this.#intervalMs) this.#hearingSince = undefined;
    else if (this.#hearingSince === undefined) this.#hearingSince = heardAt;
    if (this.#hearingSince !== undefined && heardAt - this.#noted >= this.#intervalMs) {
      await this.#o.store.noteBusHeard(node, { since: this.#hearingSince, at: heardAt });
      this.#noted = heardAt;
    }
    if (this.#isolatedFrom !== undefined || now - heardAt < nodeLeaseMs) return;
    if (now - this.#checkedAt < this.#intervalMs) return;
    this.#checkedAt = now;
    const notes = await this.#o.store.busHeard();
    // Another node heard the bus recently, and without a break for the proof's length while this
    // one heard nothing.
    const hearing = [...notes].find(
      ([other, { since, at }]) =>
        other !== node && at >= now - nodeLeaseMs && at - Math.max(since, heardAt) >= this.#proofMs,
    );
    // The bus may have come back while the notes were read.
    if (hearing === undefined || this.#o.health.heardAt > heardAt) return;
    this.#isolatedFrom = heardAt;
    this.#isolations++;
    this.#o.logger.warn(
      { silentMs: now - heardAt, hearing: hearing[0], heardMsAgo: now - hearing[1].at },
      "cut off the bus while another counter node hears it: handing every partition over",
    );
    this.#o.onChange(true);
  }
}

/** `livecount_counter_bus_isolated` and `livecount_counter_bus_isolations_total`. */
export function registerIsolationMetrics(registry: Registry, isolation: BusIsolation): void {
  new Gauge({
    name: "livecount_counter_bus_isolated",
    help: "1 while this counter node is cut off the bus and another node of its DC hears it: it has handed its partitions over",
    registers: [registry],
    collect() {
      this.set(isolation.isolated ? 1 : 0);
    },
  });
  let counted = 0;
  new Counter({
    name: "livecount_counter_bus_isolations_total",
    help: "Times this counter node found itself cut off the bus while another node of its DC heard it, and handed its partitions over",
    registers: [registry],
    collect() {
      this.inc(isolation.isolations - counted);
      counted = isolation.isolations;
    },
  });
}
