import type { Clock, Logger, TimerHandle } from "@livecount/runtime";
import type { Fence, Store } from "@livecount/store";
import { LEARNING_PEERS_PATIENCE_MS, LEARNING_PEERS_RETRY_MAX_MS, type Sync } from "./bootstrap_sync.js";

export interface BootstrapOptions {
  /** This DC (LIVECOUNT_DC): the first by name of a new deployment's DCs starts it. */
  readonly dc: string;
  readonly store: Store;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly fenceOf: (partition: number) => Fence | undefined;
  /** PartitionOwnership.leaseOf: the mark is written under it (the store fences it). */
  readonly leaseOf: (partition: number) => Fence | undefined;
  /** Remote DCs live right now. */
  readonly liveRemotes: () => readonly string[];
  /**
   * Remote DCs heard since this process started, live or not: with none listed, the deployment as
   * far as this DC knows (one that went down may hold what it is learning).
   */
  readonly heardRemotes: () => readonly string[];
  /**
   * LIVECOUNT_PEER_DCS: the other DCs of the deployment. A partition never bootstrapped waits however
   * long it takes for a DC that holds it to teach it, or (a new deployment) for every DC live now to
   * answer that it is learning it too: with DCs listed, every listed one among them; with none,
   * every DC heard since start, and only once `discoveryMs` has passed. A DC that hears no peer
   * within `discoveryMs` of starting, with none listed, is the first of its deployment.
   */
  readonly expectedPeers: readonly string[];
  /** No other DC can exist (the in-memory bus of the embedded default). */
  readonly alone: boolean;
  readonly discoveryMs: number;
  /** How often an unanswered bootstrap request is sent again, at first (Sync.retryMs grows). */
  readonly retryMs: number;
  /** Asks `remote` to compare `partitions` as a bootstrap (answered even when equal, ending with `done`). */
  readonly requestSync: (remote: string, partitions: readonly number[]) => void;
  /** The partition may serve from now on. */
  readonly serving: (partition: number) => void;
}

/** "bootstrap in progress" is written again after this long when nothing in it changed. */
const PROGRESS_LOG_MS = 10_000;

/** Quiet time after the last partition became ready before "every partition held is bootstrapped" is logged. */
const REPORT_AFTER_MS = 1000;

/**
 * A DC that joins or is rebuilt starts silent (seed 000's New Server Problem): a partition whose
 * store was never bootstrapped learns its full state from every live peer before it serves, so this
 * DC's own entries come back from what peers hold before any new increment or presence change
 * counts on top of them (otherwise they would hide under the old maximum). The store remembers a
 * bootstrapped partition, so a restart never repeats it.
 */
export class Bootstrap {
  readonly #o: BootstrapOptions;
  readonly #startedAt: number;
  /** Partitions that may serve. */
  readonly #ready = new Set<number>();
  /** Partitions syncing: who is still to answer, who taught them, who answered while learning them too. */
  readonly #syncing = new Map<number, Sync>();
  /** Partitions with nobody to learn from yet. */
  readonly #waiting = new Set<number>();
  /**
   * Partitions whose bootstrap mark is still to be read: it could not be read yet, or the lease ran
   * out here before the partition could start (the process stalled past it). A late renewal keeps
   * the lease and tells nobody, so each is checked again at the next retry its fence is back.
   */
  readonly #unchecked = new Set<number>();
  /** Partitions whose lease was taken and not dropped since. */
  readonly #held = new Set<number>();
  /**
   * Peers whose full transfer of a partition was merged before it started syncing (the peer's own
   * comparison on first contact, or one driven by the peer): they need not be asked again.
   */
  readonly #syncedFrom = new Map<number, Set<string>>();
  /** Requests of this turn, sent together: remote -> partitions. */
  readonly #requests = new Map<string, Set<number>>();
  readonly #waiters = new Map<number, Array<() => void>>();
  #timer: TimerHandle | undefined;
  #discoveryTimer: TimerHandle | undefined;
  #reportTimer: TimerHandle | undefined;
  /** Partitions held and bootstrapped when that was last logged. */
  #reported = 0;
  /** The last "bootstrap in progress" line's fields, and when it was written. */
  #progressLine = "";
  #progressLoggedAt = -Infinity;

  constructor(options: BootstrapOptions) {
    this.#o = options;
    this.#startedAt = options.clock.monotonic();
  }

  start(): void {
    this.#schedule();
    // Partitions waiting out discovery start the moment it ends, not at the retry after it.
    if (!this.#o.alone && this.#o.expectedPeers.length === 0)
      this.#discoveryTimer = this.#o.clock.setTimeout(() => {
        this.#discoveryTimer = undefined;
        for (const partition of [...this.#waiting]) this.#begin(partition);
      }, this.#o.discoveryMs);
  }

  stop(): void {
    if (this.#timer !== undefined) this.#o.clock.clearTimeout(this.#timer);
    if (this.#discoveryTimer !== undefined) this.#o.clock.clearTimeout(this.#discoveryTimer);
    this.#discoveryTimer = undefined;
    if (this.#reportTimer !== undefined) this.#o.clock.clearTimeout(this.#reportTimer);
    this.#timer = undefined;
    this.#reportTimer = undefined;
  }

  isReady(partition: number): boolean {
    return this.#ready.has(partition);
  }

  /** Partitions held that serve, and all partitions held (progress, metrics). */
  get progress(): { readonly ready: number; readonly held: number } {
    const pending = this.#syncing.size + this.#waiting.size + this.#unchecked.size;
    return { ready: this.#ready.size, held: this.#ready.size + pending };
  }

  /** Resolves true once the partition serves, false after `timeoutMs` (or when it is dropped). */
  whenReady(partition: number, timeoutMs: number): Promise<boolean> {
    if (this.#ready.has(partition)) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (): void => {
        this.#o.clock.clearTimeout(timer);
        const list = this.#waiters.get(partition);
        if (list !== undefined) list.splice(list.indexOf(done), 1);
        resolve(this.#ready.has(partition));
      };
      const timer = this.#o.clock.setTimeout(done, timeoutMs);
      const list = this.#waiters.get(partition) ?? [];
      list.push(done);
      this.#waiters.set(partition, list);
    });
  }

  /** The partition's lease was taken: serve at once if its store was bootstrapped, else learn it first. */
  partitionHeld(partition: number): Promise<void> {
    this.#held.add(partition);
    return this.#check(partition);
  }

  async #check(partition: number): Promise<void> {
    this.#unchecked.delete(partition);
    if (this.#o.fenceOf(partition) === undefined) {
      this.#recheck(partition);
      return;
    }
    let done: boolean;
    try {
      done = await this.#o.store.isBootstrapped(partition);
    } catch (err) {
      this.#o.logger.warn({ err, partition }, "bootstrap mark unreadable; trying again");
      this.#recheck(partition);
      return;
    }
    // Dropped meanwhile: its fence may still answer while the loss is handled, but it is not ours.
    if (!this.#held.has(partition)) return;
    if (this.#o.fenceOf(partition) === undefined) this.#recheck(partition);
    else if (done) this.#serve(partition);
    else this.#begin(partition);
  }

  /** Checks the partition again at the next retry, unless it was dropped meanwhile. */
  #recheck(partition: number): void {
    if (this.#held.has(partition)) this.#unchecked.add(partition);
  }

  partitionDropped(partition: number): void {
    this.#held.delete(partition);
    this.#ready.delete(partition);
    this.#syncing.delete(partition);
    this.#waiting.delete(partition);
    this.#unchecked.delete(partition);
    this.#syncedFrom.delete(partition);
    for (const wake of [...(this.#waiters.get(partition) ?? [])]) wake();
  }

  /** Entries of a syncing partition arrived: its transfer is alive, no need to ask again yet. */
  received(partition: number): void {
    const sync = this.#syncing.get(partition);
    if (sync !== undefined) sync.askedAt = this.#o.clock.monotonic();
  }

  /**
   * A peer's full transfer of `partition` (every bucket where it differed) is merged here. With
   * `peerLearning`, the peer had not bootstrapped the partition itself when it read what it sent: what it
   * holds may lack what the DCs that hold the partition hold, so it teaches nothing (two DCs rebuilt
   * together would otherwise each serve on the other's empty store, and count on top of it).
   */
  peerSynced(partition: number, peer: string, peerLearning: boolean): void {
    // Not held (dropped while the transfer's last entries merged): a later tenure learns it anew.
    if (this.#ready.has(partition) || !this.#held.has(partition)) return;
    const sync = this.#syncing.get(partition);
    if (sync === undefined) {
      if (peerLearning) return;
      let peers = this.#syncedFrom.get(partition);
      if (peers === undefined) this.#syncedFrom.set(partition, (peers = new Set()));
      peers.add(peer);
      return;
    }
    if (!sync.remaining.delete(peer)) return;
    (peerLearning ? sync.learningPeers : sync.taught).add(peer);
    this.#settle(partition, sync);
  }

  /**
   * A DC went down: partitions syncing from it stop waiting for its answer in this round (one that
   * must answer before this DC may start a partition, `#first`, is still waited for).
   */
  remoteDown(remote: string): void {
    for (const [partition, sync] of [...this.#syncing]) {
      if (sync.remaining.delete(remote)) this.#settle(partition, sync);
    }
  }

  /**
   * A DC was heard: partitions waiting for a peer start syncing, and those syncing that are not
   * waiting for its answer ask it now (it may hold them). One they never asked before brings their
   * retries back to every `retryMs`: it may change who starts them.
   */
  remoteUp(): void {
    for (const partition of [...this.#waiting]) this.#begin(partition);
    const live = this.#o.liveRemotes();
    const now = this.#o.clock.monotonic();
    for (const [partition, sync] of this.#syncing) {
      for (const remote of live) {
        if (sync.remaining.has(remote) || sync.taught.has(remote) || sync.learningPeers.has(remote)) continue;
        sync.remaining.add(remote);
        // A DC never asked before may change who starts it; one coming and going does not.
        if (!sync.asked.has(remote)) {
          sync.retryMs = this.#o.retryMs;
          sync.since = now;
        }
        this.#request(remote, partition);
      }
    }
  }

  /** Still within `discoveryMs` of starting: a DC not heard yet may still be heard. */
  get discovering(): boolean {
    return this.#o.clock.monotonic() < this.#startedAt + this.#o.discoveryMs;
  }

  #begin(partition: number): void {
    this.#waiting.delete(partition);
    const live = this.#o.liveRemotes();
    if (live.length > 0) {
      const already = this.#syncedFrom.get(partition) ?? new Set<string>();
      const sync: Sync = {
        remaining: new Set(live.filter((peer) => !already.has(peer))),
        taught: new Set(live.filter((peer) => already.has(peer))),
        learningPeers: new Set(),
        askedAt: this.#o.clock.monotonic(),
        retryMs: this.#o.retryMs,
        since: this.#o.clock.monotonic(),
        asked: new Set(),
        learningTogether: false,
      };
      this.#syncing.set(partition, sync);
      if (sync.remaining.size === 0) void this.#mark(partition);
      for (const remote of sync.remaining) this.#request(remote, partition);
      return;
    }
    const { alone, expectedPeers } = this.#o;
    if (alone || (expectedPeers.length === 0 && !this.discovering && this.#o.heardRemotes().length === 0)) {
      // The first DC of its deployment (or the only one there can be): nothing to learn.
      void this.#mark(partition);
      return;
    }
    this.#waiting.add(partition);
  }

  /**
   * Every peer asked has answered, or gone: the partition serves once one that holds it taught it.
   * Answered only by peers learning it too, it is new to the deployment if none that holds it can
   * still be heard (`#first`): the first DC by name starts it, and the others learn it from that one
   * when they ask again.
   */
  #settle(partition: number, sync: Sync): void {
    if (sync.remaining.size > 0) return;
    if (sync.taught.size > 0 || this.#first(sync.learningPeers)) {
      if (sync.taught.size === 0)
        this.#o.logger.debug(
          { partition, peers: [...sync.learningPeers] },
          "partition new to the deployment: starting it",
        );
      void this.#mark(partition);
      return;
    }
    const live = this.#o.liveRemotes();
    if (live.length === 0) {
      this.#syncing.delete(partition);
      this.#waiting.add(partition);
      return;
    }
    // Asked again once the retry is due (askedAt stays), less often while they all still learn it.
    sync.learningTogether = sync.learningPeers.size > 0;
    sync.remaining = new Set(live);
    sync.learningPeers = new Set();
    if (this.#o.clock.monotonic() - sync.since >= LEARNING_PEERS_PATIENCE_MS)
      sync.retryMs = Math.min(sync.retryMs * 2, LEARNING_PEERS_RETRY_MAX_MS);
  }

  /**
   * Whether this DC starts a partition every live peer answered it is learning too: no DC that
   * could hold it is to be heard (every listed DC answered so; with none listed, discovery is over
   * and every DC heard since start answered so), and this DC's name sorts first among the
   * deployment's (the listed ones, or those heard: an unlisted DC new too does not hold the listed
   * ones back). Names compare as strings, by UTF-16 code unit: "Paris" sorts before "amsterdam".
   */
  #first(learningPeers: ReadonlySet<string>): boolean {
    if (learningPeers.size === 0) return false;
    if (!this.#o.liveRemotes().every((peer) => learningPeers.has(peer))) return false;
    const listed = this.#o.expectedPeers;
    if (listed.length > 0 && !listed.every((peer) => learningPeers.has(peer))) return false;
    if (
      listed.length === 0 &&
      (this.discovering || !this.#o.heardRemotes().every((peer) => learningPeers.has(peer)))
    )
      return false;
    return (listed.length > 0 ? listed : [...learningPeers]).every((peer) => this.#o.dc < peer);
  }

  #request(remote: string, partition: number): void {
    this.#syncing.get(partition)?.asked.add(remote);
    const flush = this.#requests.size === 0;
    let partitions = this.#requests.get(remote);
    if (partitions === undefined) this.#requests.set(remote, (partitions = new Set()));
    partitions.add(partition);
    if (!flush) return;
    this.#o.clock.defer(() => {
      for (const [to, asked] of this.#requests) {
        this.#o.logger.info({ peer: to, partitions: asked.size }, "bootstrapping partitions from a peer");
        this.#o.requestSync(to, [...asked]);
      }
      this.#requests.clear();
    });
  }

  async #mark(partition: number): Promise<void> {
    this.#syncing.delete(partition);
    this.#syncedFrom.delete(partition);
    // Under the lease held, also if it ran out here as the last peer answered: what it learnt was
    // merged under it, and the store refuses it if another node took the partition.
    const fence = this.#o.leaseOf(partition);
    if (fence === undefined) return;
    let marked: boolean;
    try {
      marked = await this.#o.store.markBootstrapped(fence);
    } catch (err) {
      this.#o.logger.warn({ err, partition }, "bootstrap mark failed; trying again");
      if (this.#held.has(partition)) this.#waiting.add(partition);
      return;
    }
    // Not marked: the fence is stale, and the loss of the lease comes with the next renewal.
    if (!marked || !this.#held.has(partition)) return;
    // The lease ran out here during the mark: serve once it is back (serving needs the fence).
    if (this.#o.fenceOf(partition) === undefined) this.#recheck(partition);
    else this.#serve(partition);
  }

  #serve(partition: number): void {
    if (this.#ready.has(partition)) return;
    this.#ready.add(partition);
    this.#o.serving(partition);
    for (const wake of [...(this.#waiters.get(partition) ?? [])]) wake();
    this.#waiters.delete(partition);
    if (this.#o.logger.isLevelEnabled("debug")) this.#o.logger.debug(this.progress, "partition bootstrapped");
    this.#reportSoon();
  }

  /**
   * Logs once partitions stop arriving with every one held bootstrapped: a node takes its partitions
   * one by one, and a line per partition would say nothing.
   */
  #reportSoon(): void {
    if (this.#reportTimer !== undefined) return;
    this.#reportTimer = this.#o.clock.setTimeout(() => {
      this.#reportTimer = undefined;
      const { ready, held } = this.progress;
      if (ready !== held || ready === this.#reported) return;
      this.#reported = ready;
      this.#o.logger.info({ partitions: held }, "every partition held is bootstrapped");
    }, REPORT_AFTER_MS);
  }

  /**
   * While partitions are not ready: how many, how many wait with no peer to ask, how many were
   * answered only by peers learning them too, and the DCs this one waits for that it cannot hear
   * (listed, or heard since start with none listed). Written when that changes, else every
   * PROGRESS_LOG_MS: a wait for a DC out of reach can last hours.
   */
  #logProgress(now: number): void {
    const { ready, held } = this.progress;
    const live = new Set(this.#o.liveRemotes());
    const known = this.#o.expectedPeers.length > 0 ? this.#o.expectedPeers : this.#o.heardRemotes();
    const progress = {
      ready,
      held,
      waiting: this.#waiting.size,
      learningTogether: [...this.#syncing.values()].filter((s) => s.learningTogether).length,
      unreachable: known.filter((dc) => !live.has(dc)),
    };
    const line = JSON.stringify(progress);
    if (line === this.#progressLine && now - this.#progressLoggedAt < PROGRESS_LOG_MS) return;
    this.#progressLine = line;
    this.#progressLoggedAt = now;
    this.#o.logger.info(progress, "bootstrap in progress");
  }

  /** Asks again where no answer came for a while, and ends discovery for partitions nobody can teach. */
  #schedule(): void {
    this.#timer = this.#o.clock.setTimeout(() => {
      const now = this.#o.clock.monotonic();
      for (const [partition, sync] of this.#syncing) {
        if (now - sync.askedAt < sync.retryMs) continue;
        sync.askedAt = now;
        for (const remote of sync.remaining) this.#request(remote, partition);
      }
      for (const partition of [...this.#unchecked])
        if (this.#o.fenceOf(partition) !== undefined) void this.#check(partition);
      for (const partition of [...this.#waiting]) this.#begin(partition);
      if (this.#syncing.size + this.#waiting.size + this.#unchecked.size > 0) this.#logProgress(now);
      this.#schedule();
    }, this.#o.retryMs);
  }
}
