import {
  MAX_SYNC_PARTS,
  holdCode,
  opsOf,
  pageRecordFrom,
  type HoldCode,
  type PageTransitions,
  type PageViewers,
  type PresenceSync,
} from "@livecount/protocol";
import { partitionOf, type HashRing } from "@livecount/ring";
import { Backoff, type Clock, type Logger, type TimerHandle } from "@livecount/runtime";
import type { Hold, LocalPresence } from "./local_presence.js";
import { addTo, pairsOf, presenceChunks, syncFields, type PresenceChunk } from "./presence_chunks.js";
import { holdCodeOf, isUnknownType, partitionQueue, type PartitionQueue } from "./partition_queue.js";
import type { OwnerClient } from "./owner_client.js";

export interface ForwarderOptions {
  readonly owners: OwnerClient;
  readonly presence: LocalPresence;
  readonly clock: Clock;
  readonly logger: Logger;
  /** This gateway's incarnation id. */
  readonly gateway: string;
  readonly partitions: number;
  /** Ops wait this long to share a batch. */
  readonly batchMs: number;
  /** Cap of the first retry's delay after a failed send (full jitter); doubles up to `maxRetryMs`. */
  readonly retryMs: number;
  readonly maxRetryMs: number;
  /** Random numbers for the jitter (tests make it deterministic). */
  readonly random?: () => number;
  readonly onSent?: (ops: number) => void;
  /**
   * The most bytes one request to an owner may carry now (MAX_PRESENCE_REQUEST_BYTES, or half the
   * bus's max_payload when that is smaller): more goes in several.
   */
  readonly maxRequestBytes: () => number;
}

/**
 * Forwards this gateway's presence transitions to the owners of their pages in batches: per
 * partition, in order, one batch in flight, retried until acknowledged. A partition whose owner
 * changes gets a full resync, so a new owner learns everything this gateway holds.
 */
export class PresenceForwarder {
  /** How often the bus came back (PresencePages.reconnects), on every message once it has. */
  #reconnects: { readonly reconnects?: number } = {};
  readonly #opts: ForwarderOptions;
  readonly #queues = new Map<number, PartitionQueue>();
  /** Resolvers of `drain` calls, woken once nothing is queued or in flight. */
  readonly #idleWaiters = new Set<() => void>();
  #timer: TimerHandle | undefined;
  #closed = false;

  constructor(opts: ForwarderOptions) {
    this.#opts = opts;
  }

  /**
   * Queues what this gateway now holds of a viewer on a page (undefined: nothing, it left); a
   * departure with `drop` ends the viewer at the owner without the grace window. A join with
   * `visitor` false counts its viewer but not as a unique visitor (its address's budget was spent).
   */
  enqueue(page: string, viewer: string, hold: Hold | undefined, drop = false, visitor = true): void {
    const q = this.#queue(partitionOf(page, this.#opts.partitions));
    if (!q.sync) {
      let viewers = q.pages.get(page);
      if (viewers === undefined) q.pages.set(page, (viewers = new Map()));
      viewers.set(viewer, holdCodeOf(hold, drop));
      if (!visitor) addTo(q.unvisited, page, viewer);
    }
    this.#scheduleFlush();
  }

  /** The ring changed: partitions with a new (or restarted) owner get a full resync. */
  onRingChange(ring: HashRing, previous: HashRing, restarted: ReadonlySet<string>): void {
    const moved = new Set<number>();
    for (const page of this.#opts.presence.pages()) {
      const p = partitionOf(page, this.#opts.partitions);
      const owner = ring.ownerOf(p);
      if (owner !== previous.ownerOf(p) || (owner !== undefined && restarted.has(owner))) moved.add(p);
    }
    // A request going out in several parts where it holds nobody now: what is left of it must not
    // reach the new owner, which never had the parts before.
    for (const [p, q] of this.#queues) {
      const owner = ring.ownerOf(p);
      if (
        q.inFlight !== undefined &&
        (owner !== previous.ownerOf(p) || (owner !== undefined && restarted.has(owner)))
      )
        moved.add(p);
    }
    for (const p of moved) {
      this.#markSync(p);
      // The new owner is worth trying at once, whatever the old one cost us in backoff, and in the
      // batch format of this release.
      const q = this.#queue(p);
      q.legacy = false;
      q.wholeSyncs = false;
      this.#retryNow(q);
    }
    this.#scheduleFlush();
  }

  /**
   * A node began serving the partition (PageUpdates.taken): a request waiting out its backoff after
   * the owner refused it (not owned yet) goes now.
   */
  ownerServing(partition: number): void {
    const q = this.#queues.get(partition);
    if (q?.timer === undefined) return;
    this.#retryNow(q);
    this.#scheduleFlush();
  }

  /** Whatever waits out its backoff goes with the next flush, and the next failure starts small. */
  #retryNow(q: PartitionQueue): void {
    q.backoff.reset();
    if (q.timer !== undefined) this.#opts.clock.clearTimeout(q.timer);
    q.timer = undefined;
  }

  /**
   * The bus came back: what was sent before may have been lost, or held by a NATS server that
   * passes it on late. Every partition resyncs, under a count that tells the owners so.
   */
  reconnected(): void {
    this.#reconnects = { reconnects: (this.#reconnects.reconnects ?? 0) + 1 };
    this.resyncAll();
  }

  /** How often the bus came back: what the presence sent since carries (PresencePages.reconnects). */
  get reconnects(): number {
    return this.#reconnects.reconnects ?? 0;
  }

  /** Resyncs every partition this gateway holds viewers in (after a bus reconnect, or on demand). */
  resyncAll(): void {
    for (const page of this.#opts.presence.pages()) this.#markSync(partitionOf(page, this.#opts.partitions));
    this.#scheduleFlush();
  }

  /** True when nothing is queued or in flight. */
  get idle(): boolean {
    for (const q of this.#queues.values())
      if (q.inFlight !== undefined || q.sync || q.pages.size > 0) return false;
    return true;
  }

  /** Sends everything queued now and waits until it is acknowledged or `timeoutMs` passes. */
  async drain(timeoutMs: number): Promise<void> {
    this.#flush();
    if (this.idle) return;
    const { clock } = this.#opts;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clock.clearTimeout(timer);
        this.#idleWaiters.delete(done);
        resolve();
      };
      const timer = clock.setTimeout(done, timeoutMs);
      this.#idleWaiters.add(done);
    });
  }

  close(): void {
    this.#closed = true;
    if (this.#timer !== undefined) this.#opts.clock.clearTimeout(this.#timer);
    for (const q of this.#queues.values()) if (q.timer !== undefined) this.#opts.clock.clearTimeout(q.timer);
  }

  #queue(partition: number): PartitionQueue {
    let q = this.#queues.get(partition);
    if (q === undefined) {
      q = partitionQueue(new Backoff(this.#opts.retryMs, this.#opts.maxRetryMs, this.#opts.random));
      this.#queues.set(partition, q);
    }
    return q;
  }

  #markSync(partition: number): void {
    const q = this.#queue(partition);
    q.sync = true;
    q.generation++;
    q.pages.clear();
    q.unvisited.clear();
  }

  #scheduleFlush(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#timer = this.#opts.clock.setTimeout(() => {
      this.#timer = undefined;
      this.#flush();
    }, this.#opts.batchMs);
  }

  #flush(): void {
    for (const [partition, q] of this.#queues) {
      // Only a request of the current generation holds the queue: one to a former owner does not.
      if (q.inFlight === q.generation || q.timer !== undefined) continue;
      if (q.sync) void this.#sendSync(partition, q);
      else if (q.inFlight !== undefined) continue;
      else if (q.pages.size > 0) void this.#sendPages(partition, q);
      else this.#queues.delete(partition);
    }
  }

  async #sendPages(partition: number, q: PartitionQueue): Promise<void> {
    const queued = q.pages;
    q.pages = new Map();
    const unvisited = q.unvisited;
    q.unvisited = new Map();
    const generation = q.generation;
    q.inFlight = generation;
    const chunks = presenceChunks(queued, unvisited, this.#opts.maxRequestBytes(), q.legacy);
    let sent = 0;
    try {
      for (; sent < chunks.length; sent++) {
        // Superseded by a sync: it carries the current state, the rest of these are history.
        if (generation !== q.generation) return this.#settled(q, generation);
        await this.#send(partition, q, generation, chunks[sent]!.pages, chunks[sent]!.unvisited);
      }
      this.#sent(
        q,
        generation,
        chunks.reduce((n, c) => n + c.count, 0),
      );
    } catch (err) {
      if (generation !== q.generation) return this.#settled(q, generation);
      // What the owner did not acknowledge goes out again, under newer transitions of the same pair.
      for (const chunk of chunks.slice(sent)) {
        for (const [page, transitions] of chunk.pages) {
          let newer = q.pages.get(page);
          if (newer === undefined) q.pages.set(page, (newer = new Map()));
          for (let i = 0; i < transitions.length; i += 2) {
            const viewer = transitions[i] as string;
            if (!newer.has(viewer)) newer.set(viewer, transitions[i + 1] as HoldCode);
          }
        }
        for (const [page, viewers] of chunk.unvisited)
          for (const viewer of viewers) addTo(q.unvisited, page, viewer);
      }
      this.#failed(partition, q, generation, err);
    }
  }

  /**
   * One batch to the partition's owner: `presence_pages`, or `presence` to an owner of an earlier
   * release, which refuses the type it does not know. A batch a sync superseded while it was being
   * refused is not sent again: the partition may have another owner by then, which must not get
   * transitions older than its sync, nor be taken for an earlier release.
   */
  async #send(
    partition: number,
    q: PartitionQueue,
    generation: number,
    pages: readonly PageTransitions[],
    unvisited: ReadonlyMap<string, ReadonlySet<string>>,
  ): Promise<void> {
    const { owners, gateway } = this.#opts;
    if (!q.legacy) {
      try {
        await owners.request(partition, {
          type: "presence_pages",
          gateway,
          partition,
          pages,
          ...this.#reconnects,
          ...(unvisited.size > 0
            ? { unvisited: [...unvisited].map(([page, viewers]): PageViewers => [page, [...viewers]]) }
            : {}),
        });
        return;
      } catch (err) {
        if (!isUnknownType(err) || generation !== q.generation) throw err;
        q.legacy = true;
        this.#opts.logger.info(
          { partition },
          "the partition's owner is of an earlier release: presence goes to it as presence batches",
        );
      }
    }
    // Ops name their page each: cut again for their size.
    const chunks = presenceChunks(pairsOf(pages), new Map(), this.#opts.maxRequestBytes(), true);
    for (const chunk of chunks) {
      if (generation !== q.generation) return;
      const ops = chunk.pages.flatMap(opsOf);
      await owners.request(partition, { type: "presence", gateway, partition, ops, ...this.#reconnects });
    }
  }

  /**
   * Everything this gateway holds in the partition, as the owner's whole picture of it: one
   * `presence_sync`, or past what one request carries (presence_chunks.ts) `presence_sync_part`s
   * the owner gathers and applies as one once it has the last. An owner of an earlier release
   * refuses parts: it gets the first as a `presence_sync` and the rest as joins, the viewers of the
   * later ones lingering at it in between (they keep counting, and come back within their grace).
   */
  async #sendSync(partition: number, q: PartitionQueue): Promise<void> {
    q.sync = false;
    const generation = q.generation;
    q.inFlight = generation;
    const { presence, partitions } = this.#opts;
    const held: Array<[string, Array<[string, HoldCode]>]> = [];
    const unvisited = new Map<string, Set<string>>();
    for (const page of presence.pages()) {
      if (partitionOf(page, partitions) !== partition) continue;
      held.push([page, presence.holdsOf(page).map(([viewer, h]) => [viewer, holdCode(h.sockets, h.active)])]);
      // A viewer that joined past its address's budget of new ids arrives at the next owner as it
      // did here: not a unique visitor.
      for (const viewer of presence.unvisitedOf(page)) addTo(unvisited, page, viewer);
    }
    const chunks = presenceChunks(held, unvisited, this.#opts.maxRequestBytes(), q.legacy);
    // Ops queued while the sync is in flight are newer than the snapshot and follow it.
    try {
      const parts = chunks.length > 1 && !q.legacy && !q.wholeSyncs && chunks.length <= MAX_SYNC_PARTS;
      if (!parts || !(await this.#sendParts(partition, q, generation, chunks)))
        await this.#sendFirstThenJoins(partition, q, generation, chunks);
      if (generation !== q.generation) return this.#settled(q, generation);
      this.#sent(
        q,
        generation,
        held.reduce((n, [, viewers]) => n + viewers.length, 0),
      );
    } catch (err) {
      if (generation !== q.generation) return this.#settled(q, generation);
      this.#markSync(partition);
      this.#failed(partition, q, q.generation, err);
    }
  }

  /**
   * A resync as parts (PresenceSyncPart), in order; false when the owner is of a release that does
   * not know them (it refused the first, and was told nothing).
   */
  async #sendParts(
    partition: number,
    q: PartitionQueue,
    generation: number,
    chunks: readonly PresenceChunk[],
  ): Promise<boolean> {
    for (let part = 0; part < chunks.length; part++) {
      if (generation !== q.generation) return true;
      try {
        await this.#opts.owners.request(partition, {
          type: "presence_sync_part",
          ...this.#syncOf(partition, chunks[part]!),
          part,
          parts: chunks.length,
        });
      } catch (err) {
        if (part > 0 || !isUnknownType(err) || generation !== q.generation) throw err;
        q.wholeSyncs = true;
        this.#opts.logger.info(
          { partition },
          "the partition's owner is of an earlier release: a resync too large for one request goes to it as a sync and joins",
        );
        return false;
      }
    }
    return true;
  }

  /** A resync as a `presence_sync` of its first chunk, then the others as joins. */
  async #sendFirstThenJoins(
    partition: number,
    q: PartitionQueue,
    generation: number,
    [first, ...rest]: readonly PresenceChunk[],
  ): Promise<void> {
    await this.#opts.owners.request(partition, { type: "presence_sync", ...this.#syncOf(partition, first!) });
    for (const chunk of rest) {
      if (generation !== q.generation) return;
      await this.#send(partition, q, generation, chunk.pages, chunk.unvisited);
    }
  }

  /** A sync's fields for what `chunk` holds (PresenceSync: only what differs from the defaults). */
  #syncOf(partition: number, chunk: PresenceChunk): Omit<PresenceSync, "type"> {
    const { pages, sockets, passive, unvisited } = syncFields(chunk);
    return {
      gateway: this.#opts.gateway,
      partition,
      // A page named "__proto__" stays a page (pageRecordFrom).
      pages: pageRecordFrom(pages),
      ...(sockets.length > 0 ? { sockets: pageRecordFrom(sockets) } : {}),
      ...(passive.length > 0 ? { passive: pageRecordFrom(passive) } : {}),
      ...(unvisited.length > 0 ? { unvisited: pageRecordFrom(unvisited) } : {}),
      ...this.#reconnects,
    };
  }

  /** A request of `generation` is over; the queue is free unless a newer one is in flight. */
  #settled(q: PartitionQueue, generation: number): void {
    if (q.inFlight === generation) q.inFlight = undefined;
    if (q.sync || q.pages.size > 0) this.#scheduleFlush();
    else if (this.#idleWaiters.size > 0 && this.idle) for (const wake of [...this.#idleWaiters]) wake();
  }

  #sent(q: PartitionQueue, generation: number, ops: number): void {
    this.#opts.onSent?.(ops);
    if (generation === q.generation) q.backoff.reset();
    this.#settled(q, generation);
  }

  #failed(partition: number, q: PartitionQueue, generation: number, err: unknown): void {
    if (q.inFlight !== undefined && q.inFlight <= generation) q.inFlight = undefined;
    const delay = q.backoff.next();
    this.#opts.logger.warn({ err, partition, retryInMs: delay }, "presence batch failed; retrying");
    q.timer = this.#opts.clock.setTimeout(() => {
      q.timer = undefined;
      this.#scheduleFlush();
    }, delay);
  }
}
