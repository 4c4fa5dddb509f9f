import type { BusHealth, Membership } from "@livecount/cluster";
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
  /** Its membership: withdrawn from the peers' rings while cut off, back on them after. */
  readonly membership: Pick<Membership, "withdraw" | "rejoin">;
  /** Where its metrics go (registerIsolationMetrics). */
  readonly registry?: Registry;
  /** Called when this node finds itself cut off alone, and once its bus carries again (`isolated`). */
  readonly onChange: () => void;
}

/** Notes and checks go this many times per node lease. */
const CHECKS_PER_LEASE = 6;
/**
 * How long, in node leases, another node must have heard its bus past this one's last note, to
 * prove it: past two steps (a stretch of hearing outlives the last thing heard by up to two) and a
 * note's lag behind hearing. Also how long this node must hear its bus again before it takes
 * partitions back: a link that lets one answer through now and then does not churn them.
 */
const PROOF_LEASES = 0.5;
/** The proof's floor, in ms, whatever the lease. */
export const MIN_PROOF_MS = 2000;
/**
 * How long, in node leases, a stretch of hearing begun after this node's last note must last to
 * prove it. Such a stretch is what another node has when it came back from an outage first, a few
 * reconnect waits before this one: only a node still cut off long after that is alone.
 */
const LATE_PROOF_LEASES = 2;
/**
 * The late stretch's floor, in ms: many reconnect waits (500 ms and jitter), whatever the lease
 * (LIVECOUNT_NODE_LEASE_MS may be as short as 500 ms).
 */
const MIN_LATE_PROOF_MS = 10_000;

/**
 * A counter node cut off the bus while the other nodes of its DC still hear it: they and the
 * gateways forget it after the node lease, yet it keeps its partitions, whose leases it still renews
 * in Redis, so nobody can take them. Every page it owns would stay unavailable, and show what it
 * last published, for as long as the cut lasts.
 *
 * Silence alone cannot tell a cut-off node from a NATS outage, where every node hears nothing and
 * keeping the partitions is right (nobody could serve them better, and handing them around would
 * only churn). The store tells them apart, on its own clock (Store.noteBusHeard): every node notes,
 * a sixth of a node lease apart, that it hears its bus, and since when without a break. A node that
 * has heard nothing for a node lease reads the others' notes. Another node whose stretch of hearing
 * began before this node's last note, goes on (noted within the last lease), and has lasted half a
 * lease (2 s at least) past that note: the bus carries, and this node is the one cut off. In an
 * outage every stretch ends, and one begun after it proves only once it has lasted two leases (10 s
 * at least),
 * however the nodes reconnect one after another. The node hands every partition over (flushed, then released: the nodes that hear
 * the bus take them and the gateways resync them there), and takes them back through the ring once
 * it has heard its bus again for as long.
 */
export class BusIsolation {
  readonly #o: BusIsolationOptions;
  readonly #intervalMs: number;
  readonly #proofMs: number;
  readonly #lateProofMs: number;
  readonly #logs: LogThrottle;
  /** Its last step heard the bus and noted it: the next note continues the stretch. */
  #hearing = false;
  /** Since when (this process's clock) it has heard its bus without a break, while it does. */
  #hearingFrom: number | undefined;
  /** When the last step ran: a step far later than due means this process stalled. */
  #lastStepAt: number | undefined;
  #busy = false;
  /** While cut off: when (this process's clock) it last heard its bus before. */
  #silentFrom: number | undefined;
  /** While cut off: when it found itself so. */
  #isolatedAt = 0;
  #isolations = 0;
  #timer: TimerHandle | undefined;

  constructor(options: BusIsolationOptions) {
    this.#o = options;
    this.#intervalMs = Math.max(1, Math.floor(options.nodeLeaseMs / CHECKS_PER_LEASE));
    this.#proofMs = Math.max(MIN_PROOF_MS, PROOF_LEASES * options.nodeLeaseMs);
    this.#lateProofMs = Math.max(MIN_LATE_PROOF_MS, LATE_PROOF_LEASES * options.nodeLeaseMs);
    this.#logs = new LogThrottle(undefined, () => options.clock.now());
    if (options.registry !== undefined) registerIsolationMetrics(options.registry, this);
  }

  get isolated(): boolean {
    return this.#silentFrom !== undefined;
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
    const now = this.#o.clock.monotonic();
    const stalled = this.#lastStepAt !== undefined && now - this.#lastStepAt > 2 * this.#intervalMs;
    // Counted even when skipped: a slow store does not make the next step look like a stall.
    this.#lastStepAt = now;
    if (this.#busy) return;
    this.#busy = true;
    try {
      await this.#step(now, this.#o.health.heardAt, stalled);
    } catch (err) {
      this.#logs.log(this.#o.logger, "warn", { err }, "bus notes unreadable or unwritten; trying again");
    } finally {
      this.#busy = false;
    }
  }

  async #step(now: number, heardAt: number, stalled: boolean): Promise<void> {
    // A step that woke late from a stall of this process knows nothing of the bus yet (its socket
    // has not been read), so it changes nothing: a stall here is no break in the bus's stretch of
    // hearing, whose proof another node may need now, nor proof of a cut.
    if (stalled) return;
    // Heard within two steps: a round trip answered late amid load does not break a stretch.
    const hears = now - heardAt < 2 * this.#intervalMs;
    if (!hears) this.#hearingFrom = undefined;
    else this.#hearingFrom ??= heardAt;
    if (hears) {
      await this.#o.store.noteBusHeard(this.#o.node, this.#hearing);
      this.#hearing = true;
    } else this.#hearing = false;
    if (this.#silentFrom !== undefined) {
      const from = this.#hearingFrom;
      if (from !== undefined && from > this.#silentFrom && now - from >= this.#proofMs) this.#rejoin(now);
      return;
    }
    if (hears || now - heardAt < this.#o.nodeLeaseMs) return;
    const proof = await this.#proof();
    // The bus may have come back while the notes were read.
    if (proof === undefined || this.#o.health.heardAt > heardAt) return;
    this.#silentFrom = heardAt;
    this.#isolatedAt = now;
    this.#isolations++;
    this.#o.logger.warn(
      { silentMs: now - heardAt, ...proof },
      "cut off the bus while another counter node hears it: handing every partition over",
    );
    this.#o.membership.withdraw();
    this.#o.onChange();
  }

  /**
   * Another node that still hears the bus (noted within the last lease), without a break from
   * before this one's last note for the proof's length past it, or, begun after it, for two leases.
   */
  async #proof(): Promise<{ hearing: string; heardMsAgo: number } | undefined> {
    const { now, notes } = await this.#o.store.busHeard();
    const mine = notes.get(this.#o.node);
    if (mine === undefined) return undefined;
    for (const [other, { since, at }] of notes) {
      if (other === this.#o.node || at < now - this.#o.nodeLeaseMs) continue;
      const proves = since <= mine.at ? at - mine.at >= this.#proofMs : at - since >= this.#lateProofMs;
      if (proves) return { hearing: other, heardMsAgo: now - at };
    }
    return undefined;
  }

  #rejoin(now: number): void {
    this.#o.logger.warn(
      { isolatedMs: now - this.#isolatedAt },
      "the bus carries again; taking partitions back through the ring",
    );
    this.#silentFrom = undefined;
    this.#o.membership.rejoin();
    this.#o.onChange();
  }
}

/** `livecount_counter_bus_isolated` and `livecount_counter_bus_isolations_total`. */
function registerIsolationMetrics(registry: Registry, isolation: BusIsolation): void {
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
