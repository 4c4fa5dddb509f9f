import {
  DCS_SUBJECT,
  pageFromSubject,
  partitionPagesSubject,
  type Bus,
  type Subscription,
} from "@livecount/bus";
import type { DcEvent, DcLiveness } from "@livecount/cluster";
import { decodeMessage, encodeMessage, type ResyncRequest } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { yieldTurn, type Clock, type Logger, type TimerHandle } from "@livecount/runtime";
import type { Store } from "@livecount/store";
import type { ActorRegistry } from "./actor_registry.js";
import { ChangeLog } from "./change_log.js";
import { ActorClosedError } from "./page_actor.js";
import type { DurableWriter } from "./durable_writer.js";

export interface ReplicationOptions {
  readonly dc: string;
  readonly partitions: number;
  /** How often owners publish again what they changed lately, for safety. */
  readonly antiEntropyMs: number;
  readonly bus: Bus;
  readonly store: Store;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly liveness: DcLiveness;
  readonly registry: ActorRegistry;
  readonly writer: DurableWriter;
  readonly isHeld: (partition: number) => boolean;
}

/** How far back to ask a data center heard for the first time for its changes (its own clock). */
export const FIRST_CONTACT_WINDOW_MS = 10 * 60_000;
/** How long the change log remembers pages: resyncs reach back at most this far. */
const CHANGE_LOG_RETENTION_MS = 60 * 60_000;
/** Resync requests from the same DC within this window are served once. */
const RESYNC_DEBOUNCE_MS = 500;
/**
 * Resyncs reach this much further back than the last moment the link was known to work: updates
 * still in flight when it broke were lost too, and one node's heartbeat may overtake another's updates.
 */
const RESYNC_MARGIN_MS = 1000;
/** Pages published per turn of the event loop while resyncing, so a resync never stalls the node. */
const RESYNC_CHUNK = 500;

/**
 * Replication across data centers: other DCs' entries of the partitions this node holds are merged
 * into their actors (and persisted), and this DC's changes are published again when another DC may
 * have missed them (a DC up again or heard after a gap, a takeover here, and periodically).
 */
export class Replication {
  readonly #o: ReplicationOptions;
  readonly #log: ChangeLog = new ChangeLog(CHANGE_LOG_RETENTION_MS);
  /** Per held partition, the subscription that brings other DCs' entries of its pages. */
  readonly #partitionSubs = new Map<number, Subscription>();
  /** requesting DC -> when its last resync request was served and from when. */
  readonly #resyncServed = new Map<string, { at: number; since: number }>();
  /** remote DC -> when this node last published its changes again unasked for it, and from when. */
  readonly #resyncPushed = new Map<string, { at: number; since: number }>();
  /** Partitions taken since other DCs were last asked for their entries of them. */
  #acquiredUnsynced = new Set<number>();
  #acquiredTimer: TimerHandle | undefined;
  #antiEntropyTimer: TimerHandle | undefined;
  #sub: Subscription | undefined;
  #stopListening: (() => void) | undefined;
  #running = false;

  constructor(options: ReplicationOptions) {
    this.#o = options;
  }

  /** This DC's entries of `page` were published at `ts`: a later resync publishes them again. */
  published(page: string, ts: number): void {
    this.#log.record(page, ts);
  }

  start(): void {
    this.#running = true;
    this.#sub = this.#o.bus.subscribe(DCS_SUBJECT, (data) => this.#onDcMessage(data));
    this.#stopListening = this.#o.liveness.onChange((remote, event) => this.#onDcEvent(remote, event));
    this.#scheduleAntiEntropy();
  }

  stop(): void {
    this.#running = false;
    this.#sub?.unsubscribe();
    this.#stopListening?.();
    for (const sub of this.#partitionSubs.values()) sub.unsubscribe();
    this.#partitionSubs.clear();
    if (this.#antiEntropyTimer !== undefined) this.#o.clock.clearTimeout(this.#antiEntropyTimer);
    if (this.#acquiredTimer !== undefined) this.#o.clock.clearTimeout(this.#acquiredTimer);
  }

  /**
   * The partition was taken: other DCs' updates of its pages arrive from now on. While nobody here
   * owned it (a crashed owner's lease running out, a whole DC restarting) they were dropped: ask the
   * live DCs again, for every partition taken in this turn at once.
   */
  partitionAcquired(partition: number): void {
    if (this.#partitionSubs.has(partition)) return;
    const sub = this.#o.bus.subscribe(partitionPagesSubject(partition), (data, subject) =>
      this.#onRemoteUpdate(partition, data, subject),
    );
    this.#partitionSubs.set(partition, sub);
    this.#acquiredUnsynced.add(partition);
    this.#acquiredTimer ??= this.#o.clock.setTimeout(() => this.#askForAcquired(), 0);
  }

  partitionDropped(partition: number): void {
    this.#partitionSubs.get(partition)?.unsubscribe();
    this.#partitionSubs.delete(partition);
    this.#acquiredUnsynced.delete(partition);
  }

  /** Asks every live remote DC for everything it remembers changing on the partitions just taken. */
  #askForAcquired(): void {
    this.#acquiredTimer = undefined;
    const partitions = [...this.#acquiredUnsynced].filter((p) => this.#partitionSubs.has(p));
    this.#acquiredUnsynced = new Set();
    if (partitions.length === 0 || !this.#running) return;
    // A DC not heard yet is asked on first contact instead (#onDcEvent).
    for (const remote of this.#o.liveness.liveRemotes()) {
      this.#request({ type: "resync", dc: remote.dc, from: this.#o.dc, since: 0, partitions });
    }
  }

  /** Another DC's owner published its entries of a page we own here: merge and persist them. */
  #onRemoteUpdate(partition: number, data: Uint8Array, subject: string): void {
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (err) {
      this.#o.logger.warn({ err, subject }, "malformed page update");
      return;
    }
    if (msg.type !== "update" || msg.dc === this.#o.dc || pageFromSubject(subject) !== msg.page) return;
    if (!this.#o.isHeld(partition)) return;
    const { page, dc, counters } = msg;
    this.#o.registry
      .run(page, partition, (actor) => actor.mergeRemote(dc, counters))
      .catch((err: unknown) => {
        // An actor closed meanwhile (the partition was lost): the next owner asks for it again.
        if (!(err instanceof ActorClosedError)) this.#o.logger.error({ err, page }, "remote update failed");
      });
  }

  #onDcEvent(remote: string, event: DcEvent): void {
    if (event.kind === "down") return;
    // We may have missed what `remote` published meanwhile: ask its owners to publish it again.
    this.#request({ type: "resync", dc: remote, from: this.#o.dc, since: event.since });
    // And `remote` may have missed what we published. It asks us too when it hears us again, but a
    // NATS gateway link is one connection per direction and they come back one at a time: if it
    // heard us first, its request went out while its way to us was still down, and is lost. Of the
    // two DCs, the one that hears the other last does so with both ways up, and it both asks and
    // publishes again unasked; so whatever the order, both sides get everything.
    const now = this.#o.clock.now();
    const pushed = this.#resyncPushed.get(remote);
    // Every remote node's heartbeats show the same gap: publish once per burst.
    if (pushed !== undefined && now - pushed.at < RESYNC_DEBOUNCE_MS && pushed.since <= event.silentSince)
      return;
    this.#resyncPushed.set(remote, { at: now, since: event.silentSince });
    this.#resync(event.silentSince);
  }

  #onDcMessage(data: Uint8Array): void {
    let msg;
    try {
      msg = decodeMessage(data);
    } catch {
      return; // DcLiveness logs malformed messages on this subject.
    }
    if (msg.type !== "resync" || msg.dc !== this.#o.dc || msg.from === this.#o.dc) return;
    if (msg.partitions !== undefined) {
      // A new owner's request (rare, one per takeover): always served.
      this.#resync(msg.since, new Set(msg.partitions));
      return;
    }
    const now = this.#o.clock.now();
    const served = this.#resyncServed.get(msg.from);
    if (served !== undefined && now - served.at < RESYNC_DEBOUNCE_MS && served.since <= msg.since) return;
    this.#resyncServed.set(msg.from, { at: now, since: msg.since });
    this.#resync(msg.since);
  }

  #request(request: ResyncRequest): void {
    this.#o.bus.publish(DCS_SUBJECT, encodeMessage(request));
  }

  #resync(since: number, partitions?: ReadonlySet<number>): void {
    void this.#republishSince(Math.max(0, since - RESYNC_MARGIN_MS), partitions).catch((err: unknown) =>
      this.#o.logger.error({ err }, "resync failed"),
    );
  }

  /**
   * Publishes again this DC's entries of every page changed here since `since` (of `partitions`
   * only, when given): from the actor when it is in memory with nothing left to write, else from the
   * store (durable by definition: an entry is never published ahead of the store). Publishing an
   * older entry is harmless: receivers keep the per-entry max.
   */
  async #republishSince(since: number, partitions?: ReadonlySet<number>): Promise<void> {
    const { dc, partitions: count } = this.#o;
    const pages = this.#log.since(
      since,
      partitions === undefined ? undefined : (page) => partitions.has(partitionOf(page, count)),
    );
    this.#o.logger.info(
      { pages: pages.length, since, partitions: partitions?.size },
      "publishing changes again for a resync",
    );
    for (let i = 0; i < pages.length; i += RESYNC_CHUNK) {
      const chunk = pages.slice(i, i + RESYNC_CHUNK);
      const ts = this.#o.clock.now();
      await Promise.all(
        chunk.map(async (page) => {
          const partition = partitionOf(page, count);
          const actor = this.#o.registry.find(page);
          if (actor?.status === "active" && !actor.hasPendingWork)
            return this.#o.writer.republishDurable(page, partition, actor.ownEntries(), ts);
          const record = await this.#o.store.load(page);
          const own = Object.fromEntries(
            Object.entries(record).flatMap(([name, entries]) => {
              const e = entries[dc];
              return e === undefined ? [] : [[name, e] as const];
            }),
          );
          if (Object.keys(own).length > 0) this.#o.writer.republishDurable(page, partition, own, ts);
        }),
      );
      await yieldTurn(this.#o.clock);
    }
  }

  /** For safety, now and then: publish again what changed in the last two periods. */
  #scheduleAntiEntropy(): void {
    this.#antiEntropyTimer = this.#o.clock.setTimeout(() => {
      const now = this.#o.clock.now();
      this.#log.prune(now);
      if (this.#o.liveness.hasRemotes) {
        void this.#republishSince(now - 2 * this.#o.antiEntropyMs).catch((err: unknown) =>
          this.#o.logger.error({ err }, "anti-entropy failed"),
        );
      }
      if (this.#running) this.#scheduleAntiEntropy();
    }, this.#o.antiEntropyMs);
  }
}
