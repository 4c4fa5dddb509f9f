/**
 * Who is viewing one page, as seen by the page's owner: for each viewer, the gateways that hold at
 * least one of its sockets. This is where a viewer starts and stops counting:
 *
 * - a viewer counts while any gateway holds it (deduped by viewer id across gateways and tabs);
 * - when the last gateway lets it go, it lingers for the grace window, so a reload or a reconnect
 *   to another gateway causes no dip and no duplicate;
 * - when a gateway's lease lapses (the process died), everything it held is dropped at once: its
 *   viewers have had the whole lease to reconnect elsewhere;
 * - a departure without grace (a socket that switched to another viewer id: one socket is at most
 *   one viewer of a page) ends the viewer at once, lingering or not, unless another gateway still
 *   holds it.
 *
 * Pure state: time comes in as arguments, the owning actor runs the timers.
 */
export class PagePresence {
  /**
   * viewer -> the gateway holding it, or the set of gateways when several do (rare: the same viewer
   * id on two gateways). Never an empty set. A plain string for the common case saves a Set per
   * viewer on the hot path.
   */
  readonly #holders = new Map<string, string | Set<string>>();
  /**
   * viewer -> epoch-ms when it stops counting, in insertion order, which is deadline order (every
   * deadline is now + the same grace). A viewer is in #holders or #lingering, never both.
   */
  readonly #lingering = new Map<string, number>();

  /** Distinct viewers counting right now. */
  get count(): number {
    return this.#holders.size + this.#lingering.size;
  }

  get isEmpty(): boolean {
    return this.count === 0;
  }

  /** Earliest lingering deadline, or undefined when nobody lingers. */
  nextDeadline(): number | undefined {
    for (const at of this.#lingering.values()) return at;
    return undefined;
  }

  /**
   * A gateway now holds (present) or no longer holds the viewer. Idempotent. A departure with
   * `graceMs` 0 ends the viewer now, also when it was already lingering.
   */
  apply(gateway: string, viewer: string, present: boolean, now: number, graceMs: number): void {
    const holders = this.#holders.get(viewer);
    if (!present && graceMs <= 0 && holders === undefined) {
      this.#lingering.delete(viewer);
      return;
    }
    if (present) {
      if (holders === undefined) {
        this.#lingering.delete(viewer);
        this.#holders.set(viewer, gateway);
      } else if (typeof holders === "string") {
        if (holders !== gateway) this.#holders.set(viewer, new Set([holders, gateway]));
      } else holders.add(gateway);
      return;
    }
    if (holders === undefined) return;
    if (typeof holders === "string") {
      if (holders !== gateway) return;
    } else {
      if (!holders.delete(gateway)) return;
      if (holders.size > 0) return;
    }
    this.#holders.delete(viewer);
    if (graceMs > 0) this.#lingering.set(viewer, now + graceMs);
  }

  /**
   * Replaces everything `gateway` holds on this page with `viewers` (a resync after an owner change
   * or a reconnect). Viewers it no longer holds linger like after a leave.
   */
  replace(gateway: string, viewers: Iterable<string>, now: number, graceMs: number): void {
    const next = new Set(viewers);
    for (const [viewer, holders] of this.#holders) {
      if (holds(holders, gateway) && !next.has(viewer)) this.apply(gateway, viewer, false, now, graceMs);
    }
    for (const viewer of next) this.apply(gateway, viewer, true, now, graceMs);
  }

  /** Drops everything `gateway` holds, without grace: its lease lapsed. */
  dropGateway(gateway: string): void {
    for (const [viewer, holders] of this.#holders) {
      if (typeof holders === "string") {
        if (holders === gateway) this.#holders.delete(viewer);
      } else if (holders.delete(gateway) && holders.size === 0) this.#holders.delete(viewer);
    }
  }

  /** Ends the grace of viewers whose deadline has passed. */
  expire(now: number): void {
    for (const [viewer, at] of this.#lingering) {
      if (at > now) break;
      this.#lingering.delete(viewer);
    }
  }

  /** Viewers held by `gateway` (for tests and diagnostics). */
  heldBy(gateway: string): string[] {
    const out: string[] = [];
    for (const [viewer, holders] of this.#holders) if (holds(holders, gateway)) out.push(viewer);
    return out;
  }
}

function holds(holders: string | Set<string>, gateway: string): boolean {
  return typeof holders === "string" ? holders === gateway : holders.has(gateway);
}
