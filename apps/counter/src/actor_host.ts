/** What a page actor needs from its node, and what its mailbox holds. */
import type { PageActor } from "./page_actor.js";
import type { VisitorHash } from "./visitor_hash.js";

export type ActorStatus = "loading" | "active" | "closed";

/** A mailbox item: runs with no argument, or with the reason the actor could not run it. */
export type Work = (failure?: Error) => void;

export class ActorClosedError extends Error {
  override name = "ActorClosedError";
  constructor(page: string, options?: { cause?: unknown }) {
    super(`the actor of page ${JSON.stringify(page)} is closed`, options);
  }
}

/** What an actor needs from its node: the data center, time, and a way to ask for a flush. */
export interface ActorHost {
  readonly dc: string;
  readonly graceMs: number;
  /** The unique-visitor hash, keyed by LIVECOUNT_VISITOR_KEY (visitor_hash.ts). */
  readonly visitorHash: VisitorHash;
  /** Wall-clock ms: what pages record (time windows, peaks, the visitors' day). */
  now(): number;
  /**
   * Monotonic ms (Clock.monotonic): the actor's deadlines, graces and its settle window, so a wall
   * clock stepping back keeps nobody counting past their grace.
   */
  monotonic(): number;
  /** The actor has entries to persist and publish; `rewrite`: entries the store had, written again. */
  markDirty(actor: PageActor, rewrite?: boolean): void;
  /** The actor must be ticked at `at` (monotonic): a lingering viewer's grace or its settle window ends then. */
  wakeAt(actor: PageActor, at: number): void;
  /**
   * The page's viewers over data centers may have moved: it loaded, presence or another DC's entries
   * changed, or its settle window ended (occupancy webhooks). Absent: nobody watches.
   */
  viewersChanged?(actor: PageActor): void;
  /**
   * Where a page's own presence entries start when it has none (never written, or removed while
   * empty): above every `p` this DC ever held in a presence entry on the partition's pages
   * (Store.presenceFloor), so a copy of an older entry kept elsewhere can never hide a viewer who
   * comes later.
   */
  presenceFloor(partition: number): number;
  /** A presence entry of this DC of a page on the partition reached `p`. */
  presenceRaised(partition: number, p: number): void;
  /**
   * Where this DC's entry of a durable counter starts when the store holds none: the partition's
   * purge floor (Store.purgeFloor), above every entry of a counter purged from it.
   */
  purgeFloor(partition: number): number;
}
