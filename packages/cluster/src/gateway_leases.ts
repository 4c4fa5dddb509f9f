import { leaseFromAfterSilence } from "./bus_pulse.js";
import { HEARTBEATS_PER_LEASE } from "./cluster_config.js";
import { ReleasedGateways, type Released } from "./released_gateways.js";

/**
 * What a counter node knows of the gateways that sent it presence: when each was last heard, its
 * lease, and the pages where it contributed viewers. Pure state: time comes in as arguments, the
 * node's sweep calls `expire`.
 *
 * A gateway heard within its lease is alive; one silent for longer (kill -9, a cut link) is dead,
 * and everything it held is dropped at once (its viewers had the whole lease to reconnect
 * elsewhere). One that says it is going down is dropped at once too, but its viewers linger for
 * the grace window like any leave, since its sockets were closed cleanly.
 */
export interface GatewayLease {
  readonly gateway: string;
  /** Pages on this node where the gateway contributed presence. */
  readonly pages: ReadonlySet<string>;
}

/** Which gateway process an incarnation is: its stable node id and when it started. */
export interface GatewayOrigin {
  readonly node: string;
  readonly startedAt: number;
}

/**
 * Heartbeat intervals an earlier incarnation must have been silent for before a later one of its
 * node supersedes it: a live process beats every interval, so one and a half of them without a beat
 * is a missed beat, with room for a late one.
 */
export const SUPERSEDE_SILENCE = 1.5;

/**
 * What becomes of a presence request (`GatewayLeases.acceptPresence`): applied, stale (over a bus
 * connection its gateway has replaced since), or from an incarnation let go here (`Released`).
 */
export type PresenceVerdict = "accepted" | "stale" | Released;

interface LeaseState {
  lastSeen: number;
  leaseMs: number;
  origin: GatewayOrigin | undefined;
  /** The highest count of bus reconnects heard on the gateway's presence (PresencePages.reconnects). */
  reconnects: number;
  readonly pages: Set<string>;
}

export class GatewayLeases {
  readonly #leases = new Map<string, LeaseState>();
  /** Incarnations let go here: what a NATS server passes on late from them does not bring them back. */
  readonly #released = new ReleasedGateways();

  /** `defaultLeaseMs`: the lease of a gateway heard from before its first heartbeat. */
  constructor(private readonly defaultLeaseMs: number) {}

  /**
   * The gateway was heard at `now`: a heartbeat (with its lease, and which process it is) or a
   * presence request (which keeps what is already known). False, and nothing changes, for an
   * incarnation let go here and not taken back (`released`): the message was sent before that.
   */
  touch(gateway: string, now: number, leaseMs?: number, origin?: GatewayOrigin): boolean {
    if (this.#released.of(gateway) !== undefined) return false;
    const lease = this.#leases.get(gateway);
    if (lease === undefined) {
      this.#leases.set(gateway, {
        lastSeen: now,
        leaseMs: leaseMs ?? this.defaultLeaseMs,
        origin,
        reconnects: 0,
        pages: new Set(),
      });
      return true;
    }
    lease.lastSeen = Math.max(lease.lastSeen, now);
    if (leaseMs !== undefined) lease.leaseMs = leaseMs;
    if (origin !== undefined) lease.origin = origin;
    return true;
  }

  /**
   * A presence request from `gateway` came at `now`, over its bus connection after `reconnects`
   * reconnects: touched as by `touch`, its count the highest heard, unless it is stale: sent over a
   * connection the gateway has replaced since (a higher count was heard), which a NATS server held
   * and passed on late. Such a request is older than the gateway's resync since, and says nothing of
   * its viewers, nor that it is alive: "stale", and nothing changes. Nor does a request of an
   * incarnation let go here (`released`): how it was is the answer. What a lease forgets (expired,
   * down) it forgets with its count: a gateway taken back starts over.
   */
  acceptPresence(gateway: string, now: number, reconnects: number): PresenceVerdict {
    const released = this.#released.of(gateway);
    if (released !== undefined) return released;
    const lease = this.#leases.get(gateway);
    if (lease !== undefined && reconnects < lease.reconnects) return "stale";
    this.touch(gateway, now);
    this.#leases.get(gateway)!.reconnects = reconnects;
    return "accepted";
  }

  /**
   * Whether `gateway` was let go here and not taken back since, and how: "down" (it said so), or
   * "unproven" (superseded, found gone, lapsed: it may still run, and `readmit` takes it back).
   */
  released(gateway: string): Released | undefined {
    return this.#released.of(gateway);
  }

  /**
   * Whether to ask the released `gateway` now whether it still runs: it was not let go as `down`, and
   * was not asked within a heartbeat interval (a late backlog of its messages asks once).
   */
  shouldProbe(gateway: string, now: number): boolean {
    return this.#released.shouldProbe(gateway, now);
  }

  /**
   * The released `gateway` answered a probe at `now`: it runs, and what it sends from now on is
   * heard, unless it carries fewer bus reconnects than the answer did (`reconnects`): a NATS server
   * held that back, and it is older than the resync the gateway sends on being asked.
   */
  readmit(gateway: string, now: number, reconnects: number): void {
    this.#released.readmit(gateway);
    if (!this.touch(gateway, now)) return;
    const lease = this.#leases.get(gateway)!;
    lease.reconnects = Math.max(lease.reconnects, reconnects);
  }

  /**
   * Forgets and returns, at `now`, every incarnation of a gateway node that started before another
   * incarnation of the same node and has missed a heartbeat since (silent for SUPERSEDE_SILENCE
   * heartbeat intervals): that node was restarted, so they are dead (kill -9, a crash) and need not
   * be waited for until their lease lapses. An earlier incarnation that still beats is not dead but
   * a second process under the same node id (a misconfiguration: node ids are unique per process,
   * as for counter nodes); it keeps its viewers. Called on every heartbeat and every sweep.
   */
  supersede(now: number): GatewayLease[] {
    const latest = new Map<string, number>();
    for (const { origin } of this.#leases.values()) {
      if (origin !== undefined && origin.startedAt > (latest.get(origin.node) ?? -Infinity))
        latest.set(origin.node, origin.startedAt);
    }
    const superseded: GatewayLease[] = [];
    for (const [gateway, lease] of this.#leases) {
      const { origin } = lease;
      if (origin === undefined || origin.startedAt >= latest.get(origin.node)!) continue;
      const intervalMs = lease.leaseMs / HEARTBEATS_PER_LEASE;
      if (now - lease.lastSeen < SUPERSEDE_SILENCE * intervalMs) continue;
      superseded.push(this.#forget(gateway, lease, now, false));
    }
    return superseded;
  }

  /**
   * Whether a later incarnation of `gateway`'s node is known: heard from while it still beats, it is
   * a second process under the same node id.
   */
  hasLaterIncarnation(gateway: string): boolean {
    const origin = this.#leases.get(gateway)?.origin;
    if (origin === undefined) return false;
    for (const lease of this.#leases.values())
      if (lease.origin?.node === origin.node && lease.origin.startedAt > origin.startedAt) return true;
    return false;
  }

  /**
   * The other known incarnations of `gateway`'s node: the processes a restart replaced, unless one
   * still runs (a second process under the same node id). Whatever start each reports: a restart on a
   * host whose clock stepped back reports an earlier one than the process it replaced.
   */
  siblingIncarnations(gateway: string): string[] {
    const origin = this.#leases.get(gateway)?.origin;
    if (origin === undefined) return [];
    const siblings: string[] = [];
    for (const [other, lease] of this.#leases)
      if (other !== gateway && lease.origin?.node === origin.node) siblings.push(other);
    return siblings;
  }

  /** Records that `gateway` holds viewers on `page` here; the gateway must have been touched. */
  holds(gateway: string, page: string): void {
    this.#leases.get(gateway)?.pages.add(page);
  }

  /**
   * At `now` the gateway said it is going down (`down`), or a probe found it gone: forgets it and
   * returns what it held, if it was known.
   */
  drop(gateway: string, now: number, down: boolean): GatewayLease | undefined {
    const lease = this.#leases.get(gateway);
    if (lease === undefined) return undefined;
    return this.#forget(gateway, lease, now, down);
  }

  /** Forgets and returns every gateway not heard within its lease at `now`, and old releases. */
  expire(now: number): GatewayLease[] {
    this.#released.prune(now);
    const expired: GatewayLease[] = [];
    for (const [gateway, lease] of this.#leases) {
      if (lease.lastSeen + lease.leaseMs > now) continue;
      expired.push(this.#forget(gateway, lease, now, false));
    }
    return expired;
  }

  /** Every way an incarnation is let go: it is remembered as released. */
  #forget(gateway: string, lease: LeaseState, now: number, down: boolean): GatewayLease {
    this.#leases.delete(gateway);
    this.#released.add(gateway, now, down, lease.leaseMs / HEARTBEATS_PER_LEASE);
    return { gateway, pages: lease.pages };
  }

  /**
   * From `from` to `to` no gateway could be heard here: this process did not run (paused, starved, a
   * long GC; their heartbeats wait in the socket and are read right after), or the bus brought it
   * nothing (NATS down or frozen). That time does not count against any lease: each lease gets back
   * the part of it that came after it was last heard, and one heard since `to` gets nothing. Without
   * this, a node frozen longer than a gateway lease would drop every viewer on resuming, and a NATS
   * outage as long would drop them at every owner.
   */
  compensateSilence(from: number, to: number): void {
    for (const lease of this.#leases.values())
      lease.lastSeen = leaseFromAfterSilence(lease.lastSeen, from, to);
  }

  /** The page left this node's memory: no gateway holds anything on it here any more. */
  forgetPage(page: string): void {
    for (const lease of this.#leases.values()) lease.pages.delete(page);
  }

  /** Pages `gateway` holds viewers on here (empty for an unknown gateway). */
  pagesOf(gateway: string): ReadonlySet<string> {
    return this.#leases.get(gateway)?.pages ?? NO_PAGES;
  }

  /** Whether the gateway is alive as far as this node knows. */
  knows(gateway: string): boolean {
    return this.#leases.has(gateway);
  }

  /** Gateways alive as far as this node knows. */
  get size(): number {
    return this.#leases.size;
  }

  /** Whether any gateway still lists `page` (diagnostics and tests). */
  anyHolds(page: string): boolean {
    for (const lease of this.#leases.values()) if (lease.pages.has(page)) return true;
    return false;
  }
}

const NO_PAGES: ReadonlySet<string> = new Set();
