import { HOLD_LEFT, activeOfCode, socketsOfCode, type HoldCode } from "@livecount/protocol";

/** What one gateway holds of a viewer: how many of its sockets count as the viewer, and whether any is active. */
export interface Hold {
  readonly sockets: number;
  readonly active: boolean;
}

/**
 * The gateways holding one viewer. The first one's hold sits in the object itself and `more` exists
 * only while several gateways hold the viewer (rare: the same viewer id on two gateways), which
 * saves a Map per viewer on the hot path.
 */
class Holders {
  gateway: string;
  sockets: number;
  active: boolean;
  more: Map<string, Hold> | undefined;

  constructor(gateway: string, sockets: number, active: boolean) {
    this.gateway = gateway;
    this.sockets = sockets;
    this.active = active;
  }

  holds(gateway: string): boolean {
    return this.gateway === gateway || this.more?.has(gateway) === true;
  }

  /** Sockets over every holder. */
  get totalSockets(): number {
    // Most viewers have one holder: no iterator for them (this runs on every transition).
    if (this.more === undefined) return this.sockets;
    let n = this.sockets;
    for (const h of this.more.values()) n += h.sockets;
    return n;
  }

  /** Whether any holder has an active socket. */
  get anyActive(): boolean {
    if (this.active) return true;
    if (this.more === undefined) return false;
    for (const h of this.more.values()) if (h.active) return true;
    return false;
  }

  set(gateway: string, sockets: number, active: boolean): void {
    if (gateway === this.gateway) {
      this.sockets = sockets;
      this.active = active;
    } else (this.more ??= new Map()).set(gateway, { sockets, active });
  }

  /** Lets `gateway` go; false when it was the last holder (this object is then stale). */
  remove(gateway: string): boolean {
    if (gateway !== this.gateway) {
      this.more?.delete(gateway);
      return true;
    }
    const next = this.more?.entries().next();
    if (next === undefined || next.done === true) return false;
    const [other, hold] = next.value;
    this.more!.delete(other);
    this.gateway = other;
    this.sockets = hold.sockets;
    this.active = hold.active;
    return true;
  }
}

/** A viewer whose last holder let it go: it counts until `at`, active as it was then. */
interface Lingering {
  readonly at: number;
  readonly active: boolean;
}

/**
 * Who is viewing one page, as seen by the page's owner: for each viewer, the gateways that hold at
 * least one of its sockets, how many, and whether any of them is active. This is where a viewer
 * starts and stops counting:
 *
 * - a viewer counts while any gateway holds it (deduped by viewer id across gateways and tabs), and
 *   counts as active while any of its sockets is active;
 * - when the last gateway lets it go, it lingers for the grace window (active as it was), so a
 *   reload or a reconnect to another gateway causes no dip and no duplicate;
 * - when a gateway's lease lapses (the process died), everything it held is dropped at once: its
 *   viewers have had the whole lease to reconnect elsewhere;
 * - a departure without grace (a socket that switched to another viewer id: one socket is at most
 *   one viewer of a page) ends the viewer at once, lingering or not, unless another gateway still
 *   holds it.
 *
 * Connections are the sockets gateways hold now: a lingering viewer has none. The three totals are
 * kept as viewers change, so reading them costs nothing. Pure state: time comes in as arguments,
 * the owning actor runs the timers.
 */
export class PagePresence {
  /**
   * viewer -> the gateways holding it. A viewer is in #holders or #lingering, never both. Both maps
   * are made at their first viewer: an owner holds a PagePresence per resident page, many of them
   * with no viewer (likes only), and an empty Map costs 184 bytes.
   */
  #holders: Map<string, Holders> | undefined;
  /** viewer -> until when it counts, in insertion order, which is deadline order (same grace for all). */
  #lingering: Map<string, Lingering> | undefined;
  #active = 0;
  #connections = 0;
  /** Told of every viewer that starts counting (not one coming back within its grace). */
  readonly #arrived: (viewer: string) => void;

  constructor(arrived: (viewer: string) => void = () => {}) {
    this.#arrived = arrived;
  }

  /** Distinct viewers counting right now. */
  get count(): number {
    return (this.#holders?.size ?? 0) + (this.#lingering?.size ?? 0);
  }

  /** Of those, the viewers with an active socket (or that had one when they started lingering). */
  get active(): number {
    return this.#active;
  }

  /** Sockets the gateways hold on the page. */
  get connections(): number {
    return this.#connections;
  }

  /** Whether `viewer` counts here now (held or lingering). */
  has(viewer: string): boolean {
    return this.#holders?.has(viewer) === true || this.#lingering?.has(viewer) === true;
  }

  get isEmpty(): boolean {
    return this.count === 0;
  }

  /** Earliest lingering deadline, or undefined when nobody lingers. */
  nextDeadline(): number | undefined {
    for (const l of this.#lingering?.values() ?? []) return l.at;
    return undefined;
  }

  /**
   * A gateway now holds the viewer as `hold`, or (undefined) no longer holds it. Idempotent. A
   * departure with `graceMs` 0 ends the viewer now, also when it was already lingering.
   */
  apply(gateway: string, viewer: string, hold: Hold | undefined, now: number, graceMs: number): void {
    if (hold !== undefined) this.hold(gateway, viewer, hold.sockets, hold.active);
    else this.release(gateway, viewer, now, graceMs);
  }

  /**
   * One gateway's transitions, in order: viewer key, hold code, ... (protocol presence_pages.ts). A
   * viewer it left lingers for `graceMs`; one it dropped ends now.
   */
  transitions(
    gateway: string,
    transitions: ReadonlyArray<string | HoldCode>,
    now: number,
    graceMs: number,
  ): void {
    for (let i = 0; i < transitions.length; i += 2) {
      const viewer = transitions[i] as string;
      const code = transitions[i + 1] as HoldCode;
      if (code > HOLD_LEFT) this.hold(gateway, viewer, socketsOfCode(code), activeOfCode(code));
      else this.release(gateway, viewer, now, code === HOLD_LEFT ? graceMs : 0);
    }
  }

  /** `apply` of a hold, given as its fields: a batch of transitions makes no object per viewer. */
  hold(gateway: string, viewer: string, sockets: number, active: boolean): void {
    const holders = this.#holders?.get(viewer);
    if (holders === undefined) {
      if (!this.#endLingering(viewer)) this.#arrived(viewer);
      (this.#holders ??= new Map()).set(viewer, new Holders(gateway, sockets, active));
      this.#connections += sockets;
      if (active) this.#active++;
      return;
    }
    const wasActive = holders.anyActive;
    this.#connections -= holders.totalSockets;
    holders.set(gateway, sockets, active);
    this.#connections += holders.totalSockets;
    this.#active += Number(holders.anyActive) - Number(wasActive);
  }

  /** `apply` of a departure. */
  release(gateway: string, viewer: string, now: number, graceMs: number): void {
    const holders = this.#holders?.get(viewer);
    if (holders === undefined) {
      if (graceMs <= 0) this.#endLingering(viewer);
      return;
    }
    if (!holders.holds(gateway)) return;
    const wasActive = holders.anyActive;
    this.#connections -= holders.totalSockets;
    if (holders.remove(gateway)) {
      this.#connections += holders.totalSockets;
      this.#active += Number(holders.anyActive) - Number(wasActive);
      return;
    }
    this.#holders!.delete(viewer);
    if (graceMs > 0) (this.#lingering ??= new Map()).set(viewer, { at: now + graceMs, active: wasActive });
    else if (wasActive) this.#active--;
  }

  /** Ends a viewer's grace; false when it was not lingering. */
  #endLingering(viewer: string): boolean {
    const lingering = this.#lingering?.get(viewer);
    if (lingering === undefined) return false;
    this.#lingering!.delete(viewer);
    if (lingering.active) this.#active--;
    return true;
  }

  /**
   * Replaces everything `gateway` holds on this page with `held` (a resync after an owner change or
   * a reconnect). Viewers it no longer holds linger like after a leave.
   */
  replace(gateway: string, held: ReadonlyMap<string, Hold>, now: number, graceMs: number): void {
    for (const [viewer, holders] of this.#holders ?? []) {
      if (holders.holds(gateway) && !held.has(viewer)) this.apply(gateway, viewer, undefined, now, graceMs);
    }
    for (const [viewer, hold] of held) this.apply(gateway, viewer, hold, now, graceMs);
  }

  /** Drops everything `gateway` holds, without grace: its lease lapsed. */
  dropGateway(gateway: string): void {
    for (const [viewer, holders] of this.#holders ?? []) {
      if (holders.holds(gateway)) this.apply(gateway, viewer, undefined, 0, 0);
    }
  }

  /** Ends the grace of viewers whose deadline has passed. */
  expire(now: number): void {
    for (const [viewer, l] of this.#lingering ?? []) {
      if (l.at > now) break;
      this.#endLingering(viewer);
    }
  }

  /** Every viewer counting now, lingering ones included. */
  viewers(): IterableIterator<string> {
    return [...(this.#holders?.keys() ?? []), ...(this.#lingering?.keys() ?? [])].values();
  }

  /** Viewers held by `gateway` (for tests and diagnostics). */
  heldBy(gateway: string): string[] {
    const out: string[] = [];
    for (const [viewer, holders] of this.#holders ?? []) if (holders.holds(gateway)) out.push(viewer);
    return out;
  }
}
