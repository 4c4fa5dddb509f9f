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
 * How much later than this node's last hearing another node's note must be, in node leases, to
 * prove the bus carried for it after this node stopped hearing it. Past the time between two notes
 * (a sixth of a lease) and the skew of two clocks that leases tolerate: a NATS outage that every
 * node sees within a round trip never passes for one node cut off.
 */
const PROOF_LEASES = 0.5;

/**
 * A counter node cut off the bus while the other nodes of its DC still hear it: they and the
 * gateways forget it after the node lease, yet it keeps its partitions, whose leases it still renews
 * in Redis, so nobody can take them. Every page it owns would stay unavailable, and show what it
 * last published, for as long as the cut lasts.
 *
 * Silence alone cannot tell a cut-off node from a NATS outage, where every node hears nothing and
 * keeping the partitions is right (nobody could serve them better, and handing them around would
 * only churn). Redis tells them apart: every node notes in the store when it last heard its bus
 * (`Store.noteBusHeard`, a sixth of a node lease apart), and a node that has heard nothing for a
 * node lease reads the others' notes. One heard the bus recently, and half a lease or more after
 * this node stopped hearing it: the bus carries, and this node is the one cut off. It hands every
 * partition over (flushed, then released: the nodes that still hear the bus take them and the
 * gateways resync them there), and takes them back through the ring once its bus carries again.
 */
export class BusIsolation {
  readonly #o: BusIsolationOptions;
  readonly #intervalMs: number;
  readonly #logs = new LogThrottle();
  /** When this node last heard its bus as noted in the store. */
  #noted = -Infinity;
  /** When this node last read the others' notes while it heard nothing. */
  #checkedAt = -Infinity;
  #busy = false;
  /** While cut off: when its bus was last heard before. */
  #isolatedFrom: number | undefined;
  #isolations = 0;
  #timer: TimerHandle | undefined;

  constructor(options: BusIsolationOptions) {
    this.#o = options;
    this.#intervalMs = Math.max(1, Math.floor(options.nodeLeaseMs / CHECKS_PER_LEASE));
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
    if (heardAt - this.#noted >= this.#intervalMs) {
      await this.#o.store.noteBusHeard(node, heardAt);
      this.#noted = heardAt;
    }
    if (this.#isolatedFrom !== undefined || now - heardAt < nodeLeaseMs) return;
    if (now - this.#checkedAt < this.#intervalMs) return;
    this.#checkedAt = now;
    const notes = await this.#o.store.busHeard();
    const proof = PROOF_LEASES * nodeLeaseMs;
    const hearing = [...notes].find(
      ([other, at]) => other !== node && at >= heardAt + proof && at >= now - nodeLeaseMs,
    );
    // The bus may have come back while the notes were read.
    if (hearing === undefined || this.#o.health.heardAt > heardAt) return;
    this.#isolatedFrom = heardAt;
    this.#isolations++;
    this.#o.logger.warn(
      { silentMs: now - heardAt, hearing: hearing[0], heardMsAgo: now - hearing[1] },
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
