/**
 * What the bootstrap (bootstrap.ts) keeps of a partition learning its state from the live peers,
 * and how often it asks peers that are all learning it too.
 */

/** A partition learning its state from the live peers. */
export interface Sync {
  /** Peers asked that have not answered yet. */
  remaining: Set<string>;
  /** Peers that taught it: their full transfer merged, holding the partition themselves. */
  taught: Set<string>;
  /** Peers that answered while learning it themselves: merged, but they taught nothing. */
  learningPeers: Set<string>;
  /** When the remaining peers were last asked (or their entries last came). */
  askedAt: number;
  /** How long after `askedAt` they are asked again. */
  retryMs: number;
  /** When it began, or a DC it had not asked yet was heard: asked every `retryMs` for a while after. */
  since: number;
  /** Every DC it asked. */
  asked: Set<string>;
  /** Its last round was answered by peers all learning it too, and this DC could not start it. */
  learningTogether: boolean;
}

/**
 * Peers that are all learning the partition too are asked again every retry for this long after it
 * began or a DC not asked before was heard: DCs new together settle who starts it in a few seconds.
 */
export const LEARNING_PEERS_PATIENCE_MS = 10_000;
/**
 * After that, each round of such answers doubles the wait before the next request, up to this: a DC
 * that holds the partition may be out of reach, or a listed DC not built yet, for hours, and each
 * request costs every peer a read of the partition's bucket digests.
 */
export const LEARNING_PEERS_RETRY_MAX_MS = 10_000;
