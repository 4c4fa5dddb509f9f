import { antiEntropyPartitionSubject, antiEntropySubject, type Bus, type Subscription } from "@livecount/bus";
import type { DcLiveness } from "@livecount/cluster";
import {
  decodeMessage,
  encodeMessage,
  type AeBuckets,
  type AeEntries,
  type AeSummary,
  type AntiEntropyMessage,
} from "@livecount/protocol";
import type { Clock, Logger, TimerHandle } from "@livecount/runtime";
import type { Fence, Store } from "@livecount/store";
import type { ActorRegistry } from "./actor_registry.js";
import type { CounterMetrics } from "./counter_metrics.js";
import type { DurableWriter } from "./durable_writer.js";
import { Exchanges } from "./exchanges.js";
import { PurgeExchange } from "./purge_exchange.js";
import { mergeReceivedPages } from "./received_pages.js";
import { MAX_ENTRIES_MESSAGE_BYTES } from "./page_chunks.js";
import { sendPages } from "./sent_pages.js";
import { TransferGaps } from "./transfer_gaps.js";

export interface AntiEntropyOptions {
  readonly dc: string;
  readonly bus: Bus;
  readonly store: Store;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  readonly liveness: DcLiveness;
  readonly registry: ActorRegistry;
  readonly writer: DurableWriter;
  readonly fenceOf: (partition: number) => Fence | undefined;
  /**
   * The lease received entries are merged under (PartitionOwnership.leaseOf), also while it has run
   * out here: the store refuses it if another node took the partition, and a transfer merged in
   * part would teach a bootstrap with a gap.
   */
  readonly leaseOf: (partition: number) => Fence | undefined;
  /** How often this node compares the digests of the partitions it holds with every live DC. */
  readonly periodMs: number;
  /** Entries of `partition` arrived from a peer and were merged (a transfer is making progress). */
  readonly received: (partition: number) => void;
  /**
   * A transfer of `partition` from `peer` is merged (every page of its differing buckets), or nothing
   * differed: `peerLearning` when `peer` had not bootstrapped the partition itself (Bootstrap.peerSynced).
   */
  readonly peerSynced: (partition: number, peer: string, peerLearning: boolean) => void;
  /**
   * This node's store holds the partition's state (bootstrapped): what it sends may teach a new DC.
   * False too while this node has not read the partition's bootstrap mark yet: it errs on the side
   * of teaching nothing.
   */
  readonly bootstrapped: (partition: number) => boolean;
  /** Another DC held every tombstone of `partition` this store held as of `at` (PurgeExchange). */
  readonly tombsAgreed: (partition: number, remote: string, at: number) => void;
}

/** Partitions per summary message (a summary names at most 65,536). */
const PARTITIONS_PER_SUMMARY = 4096;
/**
 * After a DC is heard again, the partitions are compared at once and again after these delays: the
 * first comparison may have left on a direction of the link that was not back yet.
 */
const FOLLOW_UP_MS = [1_000, 4_000] as const;

/**
 * Anti-entropy between data centers, from durable state alone: no process remembers what changed.
 *
 * Each partition's store keeps digests of every entry of every DC (the store's digest.ts). A node
 * sends the digests of the partitions it holds to each live DC: on first contact, when a DC is
 * heard again or after a gap, when it takes partitions over, and every `periodMs`. The holder of a
 * partition there compares it with its own; where they differ, the two holders compare the
 * partition's buckets, and exchange every entry of the pages of the differing buckets, in batches,
 * read from the store (never ahead of it). Merge is a per-entry max, so a DC serves any DC's
 * entries it holds: a rebuilt DC gets its own entries back, and a DC cut off from one peer converges
 * through another.
 *
 *   X: summary {p: dX}      -> Y   (Y holds p; dY != dX, or X is bootstrapping p)
 *   Y: buckets {p: b0..63}  -> X   (X computes the differing buckets D)
 *   X: pull D               -> Y   (Y starts sending its pages of D)
 *   X: entries {D's pages}, done -> Y   and   Y: entries {D's pages}, done -> X
 *
 * Both send at once, each what its store holds: merged, each side holds max(X, Y) of every entry,
 * whatever it had merged of the other's when it read its own. Merges of one partition's entries
 * are handled in order, so a `done` is handled after every entry of its transfer is merged.
 */
export class AntiEntropy {
  readonly #o: AntiEntropyOptions;
  readonly #purge: PurgeExchange;
  /** Per held partition, the subscription to its buckets and entries. */
  readonly #held = new Map<number, Subscription>();
  /** Per partition, the handling of its messages, in order. */
  readonly #chains = new Map<number, Promise<void>>();
  readonly #exchanges: Exchanges;
  /** Follow-up comparisons scheduled after a DC was heard again. */
  readonly #followUps = new Set<TimerHandle>();
  readonly #gaps = new TransferGaps();
  /** Partitions taken in this turn: compared with every live DC together, once. */
  #justHeld = new Set<number>();
  #justHeldScheduled = false;
  #summaries: Subscription | undefined;
  #stopListening: (() => void) | undefined;
  #timer: TimerHandle | undefined;
  #running = false;

  constructor(options: AntiEntropyOptions) {
    this.#o = options;
    this.#exchanges = new Exchanges(options.clock);
    this.#purge = new PurgeExchange(options);
  }

  start(): void {
    this.#running = true;
    this.#summaries = this.#o.bus.subscribe(antiEntropySubject(this.#o.dc), (data) => this.#receive(data));
    this.#stopListening = this.#o.liveness.onChange((remote, event) => {
      // Comparisons with that DC not started yet are dropped; its transfers in flight are kept if
      // they moved while it was down (Exchanges.forget).
      this.#exchanges.forget(remote, event.kind);
      if (event.kind === "down") return;
      void this.compare(remote);
      for (const delayMs of FOLLOW_UP_MS) {
        const timer = this.#o.clock.setTimeout(() => {
          this.#followUps.delete(timer);
          if (!this.#o.liveness.liveRemotes().includes(remote)) return;
          // Only what has not been exchanged since: a heal's exchanges may still be under way.
          const pending = this.#exchanges.notExchanged(remote, this.#held.keys());
          if (pending.length > 0) void this.compare(remote, pending);
        }, delayMs);
        this.#followUps.add(timer);
      }
    });
    this.#schedule();
  }

  stop(): void {
    this.#running = false;
    for (const timer of this.#followUps) this.#o.clock.clearTimeout(timer);
    this.#followUps.clear();
    this.#exchanges.clear();
    this.#summaries?.unsubscribe();
    this.#stopListening?.();
    for (const sub of this.#held.values()) sub.unsubscribe();
    this.#held.clear();
    if (this.#timer !== undefined) this.#o.clock.clearTimeout(this.#timer);
  }

  /** Per remote DC, partitions whose transfer this node drives right now (a resync under way). */
  get resyncing(): Record<string, number> {
    return this.#exchanges.inFlight();
  }

  /** This node holds the partition now: it takes part in comparisons of it. */
  partitionHeld(partition: number): void {
    if (this.#held.has(partition)) return;
    const subject = antiEntropyPartitionSubject(this.#o.dc, partition);
    this.#held.set(
      partition,
      this.#o.bus.subscribe(subject, (data) => this.#receive(data)),
    );
    // While nobody here held it, other DCs' changes may have been missed: compare at once.
    this.#justHeld.add(partition);
    if (this.#justHeldScheduled) return;
    this.#justHeldScheduled = true;
    this.#o.clock.defer(() => {
      this.#justHeldScheduled = false;
      const partitions = [...this.#justHeld].filter((p) => this.#held.has(p));
      this.#justHeld = new Set();
      for (const remote of this.#o.liveness.liveRemotes()) void this.compare(remote, partitions);
    });
  }

  partitionDropped(partition: number): void {
    this.#held.get(partition)?.unsubscribe();
    this.#held.delete(partition);
    this.#chains.delete(partition);
    this.#exchanges.dropPartition(partition);
    this.#gaps.dropPartition(partition);
  }

  /**
   * Sends `remote` the digests of `partitions` (default: every partition held). Those named in
   * `bootstrap` are compared even when equal, and answered with `done`: this node is learning them.
   */
  async compare(
    remote: string,
    partitions?: readonly number[],
    bootstrap: readonly number[] = [],
  ): Promise<void> {
    const held = (partitions ?? [...this.#held.keys()]).filter((p) => this.#held.has(p));
    if (held.length === 0 || !this.#running) return;
    try {
      for (let i = 0; i < held.length; i += PARTITIONS_PER_SUMMARY) {
        const chunk = held.slice(i, i + PARTITIONS_PER_SUMMARY);
        const [digests, tombs] = await Promise.all([
          this.#o.store.digests(chunk),
          this.#o.store.tombDigests(chunk),
        ]);
        const boot = bootstrap.filter((p) => chunk.includes(p));
        this.#send(antiEntropySubject(remote), {
          type: "ae_summary",
          from: this.#o.dc,
          to: remote,
          digests: chunk.map((p, j) => [p, digests[j]!] as const),
          tombs,
          ...(boot.length > 0 ? { bootstrap: boot } : {}),
        });
      }
      this.#o.metrics.antiEntropy.inc({ step: "summary" });
    } catch (err) {
      this.#o.logger.warn({ err, remote }, "anti-entropy summary failed; the next one follows");
    }
  }

  #schedule(): void {
    this.#timer = this.#o.clock.setTimeout(() => {
      this.#exchanges.prune();
      for (const remote of this.#o.liveness.liveRemotes()) void this.compare(remote);
      if (this.#running) this.#schedule();
    }, this.#o.periodMs);
  }

  #receive(data: Uint8Array): void {
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (err) {
      this.#o.logger.warn({ err }, "malformed anti-entropy message");
      return;
    }
    if (!isAntiEntropy(msg) || msg.to !== this.#o.dc || msg.from === this.#o.dc) return;
    // Proof of life as good as a heartbeat, which may be queued behind this transfer's entries; and
    // the other DC is sending, so a pull of its may be queued behind them too.
    this.#o.liveness.heard(msg.from);
    this.#exchanges.heard(msg.from);
    if (msg.type === "ae_summary") {
      void this.#onSummary(msg);
      return;
    }
    if (!this.#held.has(msg.partition)) return;
    this.#inOrder(msg.partition, () =>
      msg.type === "ae_buckets" ? this.#onBuckets(msg) : this.#onEntries(msg),
    );
  }

  /** Runs `step` after every earlier step of the partition. */
  #inOrder(partition: number, step: () => Promise<void>): void {
    const chain = (this.#chains.get(partition) ?? Promise.resolve())
      .then(step)
      .catch((err: unknown) => this.#o.logger.warn({ err, partition }, "anti-entropy step failed"));
    this.#chains.set(partition, chain);
  }

  /** Another DC's digests: start a comparison of buckets for each held partition that differs. */
  async #onSummary(msg: AeSummary): Promise<void> {
    const bootstrap = new Set(msg.bootstrap ?? []);
    // A partition the other DC is learning, asked for again while this node still reads its answer to
    // the same request (Exchanges.teaches), is left to that answer.
    const mine = msg.digests.filter(
      ([p]) => this.#held.has(p) && (!bootstrap.has(p) || this.#exchanges.teaches(msg.from, p)),
    );
    void this.#purge.compareTombs(msg, (p) => this.#held.has(p));
    if (mine.length === 0) return;
    // Marked answered before anything is read: buckets the other DC sends meanwhile (its answer to
    // this node's own summary) cross the answer this node is about to send, and only one side may
    // drive (Exchanges.leftToRemote).
    for (const [partition] of mine) {
      if (bootstrap.has(partition)) this.#exchanges.learns(msg.from, partition);
      else this.#exchanges.answered(msg.from, partition);
    }
    let local: string[];
    try {
      local = await this.#o.store.digests(mine.map(([p]) => p));
    } catch (err) {
      this.#o.logger.warn(
        { err, from: msg.from },
        "anti-entropy digests unreadable; the next summary retries",
      );
      for (const [p] of mine) if (bootstrap.has(p)) this.#exchanges.taught(msg.from, p);
      return;
    }
    await Promise.all(
      mine.map(async ([partition, theirs], i) => {
        // A partition the other DC is learning is answered even when equal (its bootstrap waits for
        // the exchange's `done`). A transfer this node drives with that DC covers it already: its
        // `done` also ends the other's bootstrap.
        const peerBootstraps = bootstrap.has(partition);
        // Answered or not, the next request of that DC for the partition is answered.
        const doneAnswering = (): void => {
          if (peerBootstraps) this.#exchanges.taught(msg.from, partition);
        };
        if ((!peerBootstraps && local[i] === theirs) || this.#exchanges.isDriving(msg.from, partition))
          return doneAnswering();
        let digests: string[];
        let floor: number;
        // Before the read: digests read while this node still learns the partition teach nothing.
        const learningHere = !this.#o.bootstrapped(partition);
        try {
          digests = await this.#o.store.bucketDigests(partition);
          // A DC learning the partition takes this one's purge floor (AeBuckets.floor).
          floor = peerBootstraps ? await this.#o.store.purgeFloor(partition) : 0;
        } catch (err) {
          this.#o.logger.warn(
            { err, partition },
            "anti-entropy bucket digests unreadable; the next summary retries",
          );
          return doneAnswering();
        }
        // Driven from here meanwhile (the other's buckets came while these were read): not offered.
        if (this.#exchanges.isDriving(msg.from, partition)) return doneAnswering();
        if (!peerBootstraps) this.#exchanges.answered(msg.from, partition);
        this.#send(antiEntropyPartitionSubject(msg.from, partition), {
          type: "ae_buckets",
          from: this.#o.dc,
          to: msg.from,
          partition,
          digests,
          ...(floor > 0 ? { floor } : {}),
          ...(peerBootstraps ? { bootstrap: true } : {}),
          ...(learningHere ? { senderLearning: true } : {}),
        });
        doneAnswering();
        this.#o.metrics.antiEntropy.inc({ step: "buckets" });
      }),
    );
  }

  /** The other holder's bucket digests: drive the comparison, unless it crossed one the other DC drives. */
  async #onBuckets(msg: AeBuckets): Promise<void> {
    if (msg.senderLearning === true) this.#exchanges.senderLearning(msg.from, msg.partition);
    // Crossed, the other DC got our buckets too and drives; should its entries not come, take it back.
    const takeBack = (): void => {
      if (this.#held.has(msg.partition)) this.#inOrder(msg.partition, () => this.#drive(msg));
    };
    if (msg.bootstrap !== true && this.#exchanges.leftToRemote(msg.from, msg.partition, this.#o.dc, takeBack))
      return;
    await this.#drive(msg);
  }

  /** Sends the pages of the buckets that differ and asks for the other holder's. */
  async #drive(msg: AeBuckets): Promise<void> {
    // A transfer with that DC is in flight already (its `done` also ends a bootstrap): no second one.
    const { from, partition } = msg;
    if (this.#exchanges.isDriving(from, partition)) return;
    // A DC learning the partition from this one (a bootstrap) drives that exchange itself, on the
    // buckets answered to its request: its answer to this node's own comparison is not driven from
    // here too. Driven from both sides, every page would cross twice.
    if (msg.bootstrap !== true && this.#exchanges.isLearning(from, partition)) return;
    // Driving from here on, while the digests are read: a summary of that DC's answered meanwhile
    // leaves the partition out (its answer, read before this transfer merges, would start a second).
    this.#progress(from, partition);
    const learningHere = !this.#o.bootstrapped(partition);
    let differing: number[] = [];
    try {
      if (msg.floor !== undefined && !(await this.#purge.raiseFloor(partition, msg.floor))) return;
      const mine = await this.#o.store.bucketDigests(partition);
      differing = mine.flatMap((d, bucket) => (d !== msg.digests[bucket] ? [bucket] : []));
    } finally {
      if (differing.length === 0) this.#exchanges.stopDriving(from, partition);
    }
    if (differing.length === 0) {
      const peerLearning = this.#exchanges.endedWithLearner(from, partition);
      if (msg.bootstrap === true) this.#o.peerSynced(partition, from, peerLearning);
      return;
    }
    // The pull goes first: the other holder reads and sends its pages while this node sends its own.
    this.#send(antiEntropyPartitionSubject(msg.from, msg.partition), {
      type: "ae_entries",
      from: this.#o.dc,
      to: msg.from,
      partition: msg.partition,
      pages: {},
      pull: differing,
      ...(learningHere ? { senderLearning: true } : {}),
    });
    await this.#sendPages(msg.from, msg.partition, differing);
    this.#progress(msg.from, msg.partition);
  }

  /** A transfer this node drives moved: if it goes silent now, it is compared again. */
  #progress(remote: string, partition: number): void {
    this.#exchanges.progress(remote, partition, () => {
      this.#o.metrics.antiEntropyStalls.inc();
      this.#o.logger.warn({ remote, partition }, "anti-entropy transfer stalled; comparing again");
      void this.compare(remote, [partition]);
    });
  }

  /** Entries of the other holder: merge them, then answer a pull with ours (merged by then). */
  async #onEntries(msg: AeEntries): Promise<void> {
    this.#exchanges.received(msg.from, msg.partition);
    if (msg.senderLearning === true) this.#exchanges.senderLearning(msg.from, msg.partition);
    if (this.#exchanges.isDriving(msg.from, msg.partition)) this.#progress(msg.from, msg.partition);
    if (msg.pull !== undefined) {
      // The other DC drives this comparison: a crossed one left to it is taken.
      this.#exchanges.remoteDrives(msg.from, msg.partition);
      // Sent while the other's entries arrive and merge, outside this partition's chain.
      this.#sendPages(msg.from, msg.partition, msg.pull).catch((err: unknown) =>
        this.#o.logger.warn(
          { err, partition: msg.partition },
          "anti-entropy pages not sent; the next comparison retries",
        ),
      );
    }
    const lease = this.#o.leaseOf(msg.partition);
    if (this.#gaps.mayMerge(msg.from, msg.partition, lease)) {
      try {
        if (!(await mergeReceivedPages(this.#o, lease, msg.pages))) this.#gaps.gap(msg.from, msg.partition);
      } catch (err) {
        this.#gaps.gap(msg.from, msg.partition);
        throw err;
      }
    }
    this.#o.received(msg.partition);
    if (msg.done !== true) return;
    const gapped = this.#gaps.end(msg.from, msg.partition);
    const floored = msg.floor === undefined || (await this.#purge.raiseFloor(msg.partition, msg.floor));
    // The last message of a transfer: every page of the sender's differing buckets is merged here
    // (with a gap, a bootstrap asks the peer again at its next retry).
    this.#exchanges.done(msg.from, msg.partition);
    const peerLearning = this.#exchanges.endedWithLearner(msg.from, msg.partition);
    if (floored && !gapped) this.#o.peerSynced(msg.partition, msg.from, peerLearning);
  }

  /** Every page of `buckets` to `to`, ending the transfer (sent_pages.ts). */
  #sendPages(to: string, partition: number, buckets: readonly number[]): Promise<void> {
    const { dc, store, metrics, bootstrapped, bus } = this.#o;
    const publish = (subject: string, data: Uint8Array): void => this.#publish(subject, data);
    const maxBytes = Math.min(MAX_ENTRIES_MESSAGE_BYTES, bus.maxPayload / 2);
    return sendPages({ dc, store, metrics, bootstrapped, publish, maxBytes }, to, partition, buckets);
  }

  #send(subject: string, msg: AntiEntropyMessage): void {
    this.#publish(subject, encodeMessage(msg));
  }

  #publish(subject: string, data: Uint8Array): void {
    this.#o.bus.publish(subject, data);
    this.#o.metrics.antiEntropyBytes.inc(data.byteLength);
  }
}

function isAntiEntropy(msg: { type: string }): msg is AntiEntropyMessage {
  return msg.type === "ae_summary" || msg.type === "ae_buckets" || msg.type === "ae_entries";
}
