/**
 * Idempotency keys across data centers. A publisher whose change got no answer retries it with the
 * same key, and the retry may land in another DC (its first DC failed, or a global name resolved to
 * another). Each DC keeps its own keys, so that retry would count again. Here a partition's owner
 * sends the keys of the changes the store applied or replayed (once durable and published, with the
 * answers it gave; a replay RecentKeys answered from memory was sent when first applied) on
 * `lc.keys.<dc>.<partition>`, and one counter node of every DC (a queue group per DC, so whoever
 * holds the partition there, and while it changes hands) stores the other DCs' beside its own,
 * keeping its own where both hold a key (`Store.importKeys`). A retry that arrives after the keys is
 * answered as the change it repeats, whichever DC it reaches.
 *
 * Imports go one store call at a time, each with up to IMPORT_BATCH of the keys that arrived
 * meanwhile (on Redis Cluster, gathered for CLUSTER_IMPORT_GATHER_MS first), and are not waited for
 * by replicas: the DC's own changes wait behind at most one such
 * call in Redis, never behind a WAIT. At most `maxQueued` keys wait; past it new ones are dropped
 * (counted). A node stopping gracefully leaves the group and stores what it holds before its store
 * closes, what the broker had already sent it included; one superseded drops what it holds
 * (counted); a kill loses it.
 *
 * NATS drops what a cut link cannot carry: the sender holds what it sent (HeldKeys) until every DC
 * heard it, as their heartbeats say (`heardBy`), and sends again what one missed. A DC of an older
 * release says nothing of what it heard: what it may have missed goes again when it comes back up,
 * its heartbeats show a gap, or it asks (`remoteChanged`, `lc.keysmissed`).
 *
 * What it cannot do: a retry that reaches another DC before the keys (they leave as the change is
 * answered, at the link's latency), during a cut, in a DC rebuilt since (keys are not carried by
 * anti-entropy), after its sender restarted with keys a cut DC missed, or one of keys dropped past
 * LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS (counted lost) counts again; an imported
 * key is not kept in the receiver's memory (RecentKeys), so a Redis there that restarts without its
 * last second loses the keys of that second.
 */
import {
  KEYS_SUBJECTS,
  keysMissedFrom,
  keysMissedSubject,
  keysMissedSubjects,
  keysSubjectDc,
  partitionKeysSubject,
  type Bus,
  type Subscription,
} from "@livecount/bus";
import { MAX_APPLIED_KEYS, decodeMessage, encodeMessage, type AppliedKeys } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { LogThrottle, type Clock, type Logger } from "@livecount/runtime";
import type { KeyRestore, Store } from "@livecount/store";
import type { CounterMetrics } from "./counter_metrics.js";
import { HeldKeys, type HeardRun, type HeldKeysOptions, type SentKeys } from "./held_keys.js";

export interface KeyReplicationOptions {
  readonly dc: string;
  readonly bus: Bus;
  readonly store: Store;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  readonly partitions: number;
  /** LIVECOUNT_IDEMPOTENCY_TTL_S: how long a stored key is kept. */
  readonly keyTtlMs: number;
  /** LIVECOUNT_IDEMPOTENCY_ACROSS_DCS. */
  readonly enabled: boolean;
  /** LIVECOUNT_IDEMPOTENCY_IMPORT_MAX_KEYS: other DCs' keys waiting for the store, at most. */
  readonly maxQueued: number;
  /**
   * Whether another data center may hear the keys: one was heard since the start (live or cut off
   * now: nothing is queued for it, NATS drops what no one hears), LIVECOUNT_PEER_DCS names one, or
   * the node is within its discovery window (one may be there, not heard yet).
   */
  readonly mayBeHeard: () => boolean;
  /**
   * Keys gather this long before a store call that would take less than a full batch (on Redis
   * Cluster: CLUSTER_IMPORT_GATHER_MS). Absent: a call goes as soon as the one before returns.
   */
  readonly gather?: { readonly ms: number; readonly clock: Clock };
  /** What is sent is held for DCs that may miss it (HeldKeys). */
  readonly held: HeldKeysOptions;
  /**
   * A remote DC's triggers of one kind within this long of the last (a DC heartbeat): sent again
   * once. Each of its counter nodes' heartbeats shows the same gap, and each of its nodes asks.
   */
  readonly resendCoalesceMs: number;
}

/**
 * Keys per store call: this DC's own changes queue in Redis behind a call's script (2 to 2.6 ms of
 * Redis for 200 keys). With another DC's 20,000 changes a second, an increment's p99 is 9 to 17 ms
 * (1 to 2 alone), its median 1.3 to 1.6 times what it is alone (`loadtest/bench/key_import.js`).
 */
const IMPORT_BATCH = 200;

/**
 * On Redis Cluster each partition's keys are a script call of their own (they share a slot), and
 * keys arrive spread over most partitions: a call of 200 fresh keys was some 140 scripts, and at
 * another DC's 20,000 changes a second this DC's own increments waited 7 to 9 times longer at the
 * median. Gathered for this long, a partition has several keys a script: 1.1 to 3 times. The price:
 * a key reaches the store up to this much later, beside the link's latency
 * (`loadtest/bench/key_import.js ... cluster`).
 */
export const CLUSTER_IMPORT_GATHER_MS = 50;

export class KeyReplication {
  readonly #o: KeyReplicationOptions;
  readonly #logs = new LogThrottle();
  #sub: Subscription | undefined;
  /** Other DCs asking this node to send its held keys again (keysMissedSubjects). */
  #missedSub: Subscription | undefined;
  /** Other DCs' keys waiting for the store, by partition. */
  #queued = new Map<number, KeyRestore[]>();
  #queuedKeys = 0;
  #importing = false;
  #importLoop: Promise<void> = Promise.resolve();
  #leaving: Promise<void> = Promise.resolve();
  #left = false;
  /** Ends the keys' gathering now (a node leaving stores what it holds at once). */
  #endGather: (() => void) | undefined;
  #stopped = false;
  readonly #held: HeldKeys;
  /** When held keys were last sent again, per remote DC and cause (heard again, or asked). */
  readonly #resentAt = new Map<string, number>();

  constructor(options: KeyReplicationOptions) {
    this.#o = options;
    this.#held = new HeldKeys(options.held);
  }

  /** Whether keys are sent now: the caller builds the records only then. */
  get sending(): boolean {
    return this.#o.enabled && this.#o.mayBeHeard();
  }

  /** Joins this DC's queue group for other DCs' keys. */
  start(): void {
    if (!this.#o.enabled || this.#sub !== undefined) return;
    this.#sub = this.#o.bus.subscribe(
      KEYS_SUBJECTS,
      (data, subject) => {
        // This DC's own keys, which its store has: dropped unread.
        if (keysSubjectDc(subject) !== this.#o.dc) this.#received(data);
      },
      { queue: `lc-keys-${this.#o.dc}` },
    );
    this.#missedSub = this.#o.bus.subscribe(keysMissedSubjects(this.#o.dc), (_data, subject) => {
      const from = keysMissedFrom(subject);
      // Only a DC held for: any other name would be one more entry in #resentAt.
      if (from !== undefined && from !== this.#o.dc && this.#held.knows(from)) this.#resend(from, "asked");
    });
  }

  /**
   * Leaves the group (a graceful stop): the DC's other nodes take the keys from now on, and what the
   * broker already sent this node is still taken (the subscription drains).
   */
  leave(): void {
    const sub = this.#sub;
    this.#sub = undefined;
    this.#left = true;
    this.#endGather?.();
    if (sub === undefined) return;
    if (sub.drain !== undefined) this.#leaving = sub.drain();
    else sub.unsubscribe();
  }

  /** Resolves once every key this node holds went to the store (after `leave`, before it closes). */
  async drained(): Promise<void> {
    await this.#leaving;
    await this.#importLoop;
  }

  /** Leaves the group; keys still queued are dropped (counted), and no store call follows. */
  stop(): void {
    this.leave();
    this.#missedSub?.unsubscribe();
    this.#missedSub = undefined;
    this.#stopped = true;
    if (this.#queuedKeys > 0) this.#o.metrics.keysAcrossDcs.inc({ outcome: "dropped" }, this.#queuedKeys);
    this.#queued = new Map();
    this.#queuedKeys = 0;
  }

  /**
   * Sends the keys of changes answered on pages of each partition, MAX_APPLIED_KEYS a message. Never
   * throws: a key not sent reopens only the gap this closes (counted as unsent).
   */
  send(byPartition: ReadonlyMap<number, readonly KeyRestore[]>): void {
    if (!this.sending) return;
    const { dc, metrics } = this.#o;
    for (const [partition, keys] of byPartition) {
      for (let from = 0; from < keys.length; from += MAX_APPLIED_KEYS) {
        const chunk = keys.slice(from, from + MAX_APPLIED_KEYS);
        const msg: AppliedKeys = { type: "keys", dc, partition, keys: chunk };
        const sent: SentKeys = {
          subject: partitionKeysSubject(dc, partition),
          data: encodeMessage(msg),
          keys: chunk.length,
        };
        if (this.#publish(sent, "sent")) {
          const lost = this.#held.add(sent);
          if (lost > 0) metrics.keysAcrossDcs.inc({ outcome: "lost" }, lost);
        }
      }
    }
    metrics.keysHeld.set(this.#held.keys);
  }

  /**
   * A remote DC went down, came back up, or showed a gap in its heartbeats (DcLiveness). A DC that
   * says what it heard gets what it missed once its heartbeats show it (`heardBy`), whichever way of
   * the link healed first. One of an older release does not: everything held goes to it again now,
   * and it is asked to send its own again (the other way may come back later, each way being a
   * connection of its own, and the request arrives only once its keys can).
   */
  remoteChanged(remote: string, kind: "up" | "gap" | "down"): void {
    if (!this.#o.enabled) return;
    if (kind === "down") {
      this.#held.down(remote);
      this.#o.metrics.keysHeld.set(this.#held.keys);
      return;
    }
    this.#resend(remote, kind);
    try {
      this.#o.bus.publish(keysMissedSubject(remote, this.#o.dc), new Uint8Array(0));
    } catch (err) {
      this.#logs.log(this.#o.logger, "warn", { err, dc: remote }, "could not ask a DC for the keys it held");
    }
  }

  /** What the nodes of `remote` heard of this node lately (DcLiveness): what they missed goes again. */
  heardBy(remote: string, runs: readonly HeardRun[]): void {
    if (!this.#o.enabled) return;
    this.#sendAgain(remote, this.#held.heard(remote, runs), "missed");
  }

  #resend(remote: string, why: "up" | "gap" | "asked"): void {
    // Hearing it again and being asked are told apart: one does not make the other needless (the
    // link's two ways heal apart), but several of one kind within a heartbeat say the same.
    const cause = `${why === "asked" ? "asked" : "heard"} ${remote}`;
    const now = this.#o.held.clock.monotonic();
    const last = this.#resentAt.get(cause);
    if (last !== undefined && now - last < this.#o.resendCoalesceMs) return;
    this.#resentAt.set(cause, now);
    this.#sendAgain(remote, this.#held.missedBy(remote), why);
  }

  #sendAgain(remote: string, missed: readonly SentKeys[], why: string): void {
    this.#o.metrics.keysHeld.set(this.#held.keys);
    for (const sent of missed) this.#publish(sent, "resent");
    if (missed.length > 0)
      this.#o.logger.info(
        { dc: remote, keys: missed.reduce((sum, m) => sum + m.keys, 0), why },
        "idempotency keys sent again to a DC that may have missed them",
      );
  }

  #publish(sent: SentKeys, outcome: "sent" | "resent"): boolean {
    const { bus, metrics, logger } = this.#o;
    try {
      bus.publish(sent.subject, sent.data);
      metrics.keysAcrossDcs.inc({ outcome }, sent.keys);
      return true;
    } catch (err) {
      metrics.keysAcrossDcs.inc({ outcome: "unsent" }, sent.keys);
      this.#logs.log(
        logger,
        "warn",
        { err, subject: sent.subject },
        "idempotency keys not sent to other DCs",
      );
      return false;
    }
  }

  #received(data: Uint8Array): void {
    const { dc, metrics, logger, partitions, maxQueued } = this.#o;
    let msg;
    try {
      msg = decodeMessage(data);
      if (msg.type !== "keys") throw new Error(`a ${msg.type} message where keys go`);
    } catch (err) {
      metrics.keysAcrossDcs.inc({ outcome: "malformed" });
      this.#logs.log(logger, "warn", { err }, "malformed idempotency keys from another DC dropped");
      return;
    }
    if (msg.dc === dc || this.#stopped) return;
    // The store writes a partition's keys together: a page of another partition is a sender's bug,
    // or DCs that disagree on LIVECOUNT_PARTITIONS.
    const keys = msg.keys.filter((k) => partitionOf(k.page, partitions) === msg.partition);
    if (keys.length < msg.keys.length) {
      metrics.keysAcrossDcs.inc({ outcome: "malformed" }, msg.keys.length - keys.length);
      this.#logs.log(
        logger,
        "warn",
        { from: msg.dc },
        "idempotency keys of pages of another partition dropped",
      );
    }
    const room = Math.max(0, maxQueued - this.#queuedKeys);
    if (keys.length > room) metrics.keysAcrossDcs.inc({ outcome: "dropped" }, keys.length - room);
    if (room === 0) return;
    const taken = keys.length > room ? keys.slice(0, room) : keys;
    const list = this.#queued.get(msg.partition);
    if (list === undefined) this.#queued.set(msg.partition, [...taken]);
    else list.push(...taken);
    this.#queuedKeys += taken.length;
    if (!this.#importing) this.#importLoop = this.#import();
  }

  /** One store call at a time, each with up to IMPORT_BATCH of the keys queued by then. */
  async #import(): Promise<void> {
    const { store, keyTtlMs, metrics, logger } = this.#o;
    this.#importing = true;
    try {
      await this.#gathered();
      while (this.#queuedKeys > 0 && !this.#stopped) {
        const { batch, count } = this.#take(IMPORT_BATCH);
        try {
          const stored = await store.importKeys(batch, keyTtlMs);
          if (stored > 0) metrics.keysAcrossDcs.inc({ outcome: "stored" }, stored);
          if (count > stored) metrics.keysAcrossDcs.inc({ outcome: "kept" }, count - stored);
        } catch (err) {
          metrics.keysAcrossDcs.inc({ outcome: "failed" }, count);
          this.#logs.log(logger, "warn", { err, keys: count }, "idempotency keys of other DCs not stored");
        }
        if (this.#queuedKeys < IMPORT_BATCH) await this.#gathered();
      }
    } finally {
      this.#importing = false;
    }
  }

  /** Waits while keys gather (KeyReplicationOptions.gather); leaving ends the wait. */
  async #gathered(): Promise<void> {
    const gather = this.#o.gather;
    if (gather === undefined || this.#left) return;
    await new Promise<void>((resolve) => {
      const timer = gather.clock.setTimeout(() => this.#endGather?.(), gather.ms);
      this.#endGather = () => {
        gather.clock.clearTimeout(timer);
        this.#endGather = undefined;
        resolve();
      };
    });
  }

  /** Takes up to `limit` queued keys, oldest partitions first. */
  #take(limit: number): { batch: Map<number, KeyRestore[]>; count: number } {
    const batch = new Map<number, KeyRestore[]>();
    let count = 0;
    for (const [partition, keys] of this.#queued) {
      const taken = keys.length <= limit - count ? keys : keys.splice(0, limit - count);
      batch.set(partition, taken);
      count += taken.length;
      if (taken === keys) this.#queued.delete(partition);
      if (count === limit) break;
    }
    this.#queuedKeys -= count;
    return { batch, count };
  }
}
