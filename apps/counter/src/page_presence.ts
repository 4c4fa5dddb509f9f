import { HOLD_LEFT, activeOfCode, socketsOfCode, type HoldCode } from "@livecount/protocol";

/** What one gateway holds of a viewer: how many of its sockets count as the viewer, and whether any is active. */
export interface Hold {
  readonly sockets: number;
  readonly active: boolean;
}

/**
 * One viewer of the page: the gateways holding it, or (`until` > 0) when it stops counting now that
 * none does. The first holder's hold sits in the object itself and `more` exists only while several
 * gateways hold the viewer (rare: the same viewer id on two gateways), which saves a Map per viewer
 * on the hot path; a viewer that lingers and comes back keeps its object.
 */
class Viewer {
  gateway: string;
  sockets: number;
  /** While held, whether a holder's socket is active; while lingering, whether one was when it began. */
  active: boolean;
  more: Map<string, Hold> | undefined;
  /** Lingering until then (monotonic ms, ActorHost.monotonic); 0 while a gateway holds it. */
  until = 0;

  constructor(gateway: string, sockets: number, active: boolean) {
    this.gateway = gateway;
    this.sockets = sockets;
    this.active = active;
  }

  /** Whether `gateway` holds it (never while lingering). */
  holds(gateway: string): boolean {
    return this.until === 0 && (this.gateway === gateway || this.more?.has(gateway) === true);
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

  /** Lets `gateway` go; false when it was the last holder (the caller ends or lingers the viewer). */
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
 *
 * Held and lingering viewers share one map, so a transition costs one lookup and a viewer's grace
 * no object: the graces are a queue in the order they began, which is deadline order (the same
 * grace for all), holding each grace's viewer and deadline. A viewer that came back, or began
 * another grace, leaves its old entry behind, passed over once its deadline is reached.
 */
export class PagePresence {
  /**
   * viewer -> its holders or its grace. Made at the first viewer: an owner holds a PagePresence per
   * resident page, many of them with no viewer (likes only), and an empty Map costs 184 bytes.
   */
  #viewers: Map<string, Viewer> | undefined;
  /** The graces begun and not yet passed, from `#graceHead` on: their viewers and deadlines. */
  #graceViewers: string[] | undefined;
  #graceUntil: number[] | undefined;
  #graceHead = 0;
  #active = 0;
  #connections = 0;
  /** Told of every viewer that starts counting (not one coming back within its grace). */
  readonly #arrived: (viewer: string) => void;

  constructor(arrived: (viewer: string) => void = () => {}) {
    this.#arrived = arrived;
  }

  /** Distinct viewers counting right now. */
  get count(): number {
    return this.#viewers?.size ?? 0;
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
    return this.#viewers?.has(viewer) === true;
  }

  get isEmpty(): boolean {
    return this.count === 0;
  }

  /**
   * Earliest lingering deadline, or undefined when nobody lingers. Passes over the graces at the
   * head of the queue that no longer stand (their viewers came back or began another).
   */
  nextDeadline(): number | undefined {
    const viewers = this.#graceViewers;
    if (viewers === undefined) return undefined;
    const until = this.#graceUntil!;
    for (; this.#graceHead < viewers.length; this.#graceHead++) {
      const at = until[this.#graceHead]!;
      if (this.#viewers!.get(viewers[this.#graceHead]!)?.until === at) return at;
    }
    this.#compactGraces();
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
    const v = this.#viewers?.get(viewer);
    if (v === undefined) {
      this.#arrived(viewer);
      (this.#viewers ??= new Map()).set(viewer, new Viewer(gateway, sockets, active));
      this.#connections += sockets;
      if (active) this.#active++;
      return;
    }
    if (v.until !== 0) {
      // Back within its grace: it held no socket, and counted as active as it was.
      v.until = 0;
      v.gateway = gateway;
      v.sockets = sockets;
      this.#active += Number(active) - Number(v.active);
      v.active = active;
      this.#connections += sockets;
      return;
    }
    const wasActive = v.anyActive;
    this.#connections -= v.totalSockets;
    v.set(gateway, sockets, active);
    this.#connections += v.totalSockets;
    this.#active += Number(v.anyActive) - Number(wasActive);
  }

  /** `apply` of a departure. */
  release(gateway: string, viewer: string, now: number, graceMs: number): void {
    const v = this.#viewers?.get(viewer);
    if (v === undefined) return;
    if (v.until !== 0) {
      if (graceMs <= 0) this.#end(viewer, v);
      return;
    }
    if (!v.holds(gateway)) return;
    const wasActive = v.anyActive;
    this.#connections -= v.totalSockets;
    if (v.remove(gateway)) {
      this.#connections += v.totalSockets;
      this.#active += Number(v.anyActive) - Number(wasActive);
      return;
    }
    // Its last holder let it go (its sockets are out of the connections already).
    if (graceMs <= 0) {
      this.#viewers!.delete(viewer);
      if (wasActive) this.#active--;
      return;
    }
    v.until = now + graceMs;
    v.gateway = "";
    v.sockets = 0;
    v.active = wasActive;
    v.more = undefined;
    (this.#graceViewers ??= []).push(viewer);
    (this.#graceUntil ??= []).push(v.until);
  }

  /** A lingering viewer stops counting. */
  #end(viewer: string, v: Viewer): void {
    this.#viewers!.delete(viewer);
    if (v.active) this.#active--;
  }

  /**
   * Replaces everything `gateway` holds on this page with `held` (a resync after an owner change or
   * a reconnect). Viewers it no longer holds linger like after a leave.
   */
  replace(gateway: string, held: ReadonlyMap<string, Hold>, now: number, graceMs: number): void {
    for (const [viewer, v] of this.#viewers ?? []) {
      if (v.holds(gateway) && !held.has(viewer)) this.release(gateway, viewer, now, graceMs);
    }
    for (const [viewer, hold] of held) this.hold(gateway, viewer, hold.sockets, hold.active);
  }

  /** Drops everything `gateway` holds, without grace: its lease lapsed. */
  dropGateway(gateway: string): void {
    for (const [viewer, v] of this.#viewers ?? []) {
      if (v.holds(gateway)) this.release(gateway, viewer, 0, 0);
    }
  }

  /**
   * Ends the grace of viewers whose deadline has passed. The first grace that still stands and has
   * not ended stops it; the ones no longer standing are passed over whatever their deadline (after
   * the clock stepped back, one may be later than a standing one behind it).
   */
  expire(now: number): void {
    const viewers = this.#graceViewers;
    if (viewers === undefined) return;
    const until = this.#graceUntil!;
    for (; this.#graceHead < viewers.length; this.#graceHead++) {
      const at = until[this.#graceHead]!;
      const viewer = viewers[this.#graceHead]!;
      const v = this.#viewers!.get(viewer);
      if (v?.until !== at) continue;
      if (at > now) break;
      this.#end(viewer, v);
    }
    this.#compactGraces();
  }

  /** Drops the graces passed: all of them once none is left, else once they are most of the queue. */
  #compactGraces(): void {
    const viewers = this.#graceViewers!;
    if (this.#graceHead === viewers.length) {
      this.#graceViewers = this.#graceUntil = undefined;
      this.#graceHead = 0;
    } else if (this.#graceHead > GRACES_KEPT_PASSED && 2 * this.#graceHead > viewers.length) {
      viewers.splice(0, this.#graceHead);
      this.#graceUntil!.splice(0, this.#graceHead);
      this.#graceHead = 0;
    }
  }

  /** Every viewer counting now, lingering ones included. */
  viewers(): IterableIterator<string> {
    return [...(this.#viewers?.keys() ?? [])].values();
  }

  /** Viewers held by `gateway` (for tests and diagnostics). */
  heldBy(gateway: string): string[] {
    const out: string[] = [];
    for (const [viewer, v] of this.#viewers ?? []) if (v.holds(gateway)) out.push(viewer);
    return out;
  }
}

/** Passed graces left at the queue's head before it is compacted: a splice costs the queue's length. */
const GRACES_KEPT_PASSED = 64;
