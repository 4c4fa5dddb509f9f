import { VIEWERS_COUNTER } from "@livecount/protocol";
import type { Level, OccupancyRules } from "./occupancy_rules.js";
import type { PageActor } from "./page_actor.js";
import type { OccupancyEvent } from "./webhook_event.js";

/** Where occupancy events go (WebhookSender). */
export interface OccupancySink {
  send(event: OccupancyEvent): void;
  /** The partition just started serving here: hold its pages' deliveries until `until` (monotonic). */
  hold(partition: number, until: number): void;
}

/** What the actor registry asks of the occupancy watch, when there is one (webhooks configured). */
export interface OccupancyWatch {
  /** The actor's viewers may have moved: it loaded, its entries changed, or its settle window ended. */
  observe(actor: PageActor): void;
  /** The actor must stay in memory although it is idle (no viewer held here, nothing to write). */
  keeps(actor: PageActor): boolean;
  /** The actor left memory (the registry's one teardown). */
  forget(actor: PageActor): void;
  /** The partition started serving here; pages loaded until `settledAt` (monotonic) hold their stored viewers. */
  partitionServing(partition: number, settledAt: number): void;
}

export interface OccupancyOptions {
  readonly rules: OccupancyRules;
  /** Whether a data center's viewers count (DcLiveness): this one's always do. */
  readonly isLive: (dc: string) => boolean;
  readonly now: () => number;
  readonly sink: OccupancySink;
}

/**
 * Turns the viewers of the pages this node owns into occupancy events. Each page actor in memory
 * has a level (occupied, thresholds crossed); an actor's first level is what it loaded from the
 * store (the page's previous owner or actor left it there), announced by nobody, so a page taken
 * over or loaded again with viewers is not `occupied` again. From then on every change of the
 * page's total over live data centers goes through `OccupancyRules`, once the actor is settled
 * (after a takeover, presence is held while gateways resync, and so is the level).
 *
 * A page with viewers in any data center stays in memory (`keeps`), so a data center going down
 * or coming back moves the level of every page it has viewers on (`dcChanged`).
 */
export class Occupancy implements OccupancyWatch {
  readonly #o: OccupancyOptions;
  readonly #levels = new Map<PageActor, Level>();

  constructor(options: OccupancyOptions) {
    this.#o = options;
  }

  observe(actor: PageActor): void {
    if (actor.status !== "active") return;
    const { rules, isLive } = this.#o;
    const viewers = actor.livePresence(VIEWERS_COUNTER, isLive);
    const level = this.#levels.get(actor);
    if (level === undefined) {
      this.#levels.set(actor, rules.initial(viewers));
      return;
    }
    if (!actor.settled) return;
    const { level: next, transitions } = rules.step(level, viewers);
    if (transitions.length === 0) return;
    this.#levels.set(actor, next);
    const ts = this.#o.now();
    const { page, partition } = actor;
    for (const t of transitions) this.#o.sink.send({ ...t, page, partition, viewers, ts });
  }

  keeps(actor: PageActor): boolean {
    // Any DC's, live or not: a page whose viewers are in a DC that is down must be here when the
    // DC comes back, or its level would not move with it.
    for (const e of Object.values(actor.entries(VIEWERS_COUNTER))) if (e.p !== e.n) return true;
    return false;
  }

  forget(actor: PageActor): void {
    this.#levels.delete(actor);
  }

  partitionServing(partition: number, settledAt: number): void {
    this.#o.sink.hold(partition, settledAt);
  }

  /** A data center went down or came back: the totals of the pages it has viewers on moved. */
  dcChanged(): void {
    for (const actor of this.#levels.keys()) this.observe(actor);
  }

  /** Pages with a level (diagnostics and tests). */
  get size(): number {
    return this.#levels.size;
  }
}
