/**
 * The receiving side of idempotency keys across DCs (key_replication.ts): one counter node of this
 * DC (a queue group per DC, so whoever holds the partition here, and while it changes hands) takes
 * each keys message of another DC and stores its keys beside this DC's own, keeping its own where
 * both hold a key (`Store.importKeys`). Once every key of a message is stored it acknowledges the
 * message to its sender (KeysAck on `lc.keysack.<dc>.<node>`); what it drops, fails to store or loses
 * in a stop it does not, and gets again.
 *
 * Imports go one store call at a time, each with up to IMPORT_BATCH of the keys that arrived
 * meanwhile (on Redis Cluster, gathered for CLUSTER_IMPORT_GATHER_MS first), and are not waited for
 * by replicas: the DC's own changes wait behind at most one such call in Redis, never behind a WAIT.
 * At most `maxQueued` keys wait; past it new ones are dropped (counted). A node stopping gracefully
 * leaves the group and stores what it holds before its store closes, what the broker had already
 * sent it included; one superseded drops what it holds (counted); a kill loses it.
 */
import { KEYS_SUBJECTS, keysAckSubject, keysSubjectDc, type Bus, type Subscription } from "@livecount/bus";
import { MAX_ACKED, decodeMessage, encodeMessage, type KeysAck } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { LogThrottle, type Clock, type Logger } from "@livecount/runtime";
import type { KeyRestore, Store } from "@livecount/store";
import type { CounterMetrics } from "./counter_metrics.js";

export interface ImportedKeysOptions {
  readonly dc: string;
  readonly bus: Bus;
  readonly store: Store;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  readonly partitions: number;
  /** LIVECOUNT_IDEMPOTENCY_TTL_S: how long a stored key is kept. */
  readonly keyTtlMs: number;
  /** LIVECOUNT_IDEMPOTENCY_IMPORT_MAX_KEYS: other DCs' keys waiting for the store, at most. */
  readonly maxQueued: number;
  /**
   * Keys gather this long before a store call that would take less than a full batch (on Redis
   * Cluster: CLUSTER_IMPORT_GATHER_MS). Absent: a call goes as soon as the one before returns.
   */
  readonly gather?: { readonly ms: number; readonly clock: Clock };
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

/** A keys message that names its sender: acknowledged once `left` reaches 0. */
interface Received {
  readonly dc: string;
  readonly node: string;
  readonly epoch: number;
  readonly seq: number;
  left: number;
}

/** A partition's keys waiting for the store, each with the message it came in (if it names one). */
interface Queue {
  readonly keys: KeyRestore[];
  readonly from: Array<Received | undefined>;
}

export class ImportedKeys {
  readonly #o: ImportedKeysOptions;
  readonly #logs = new LogThrottle();
  #sub: Subscription | undefined;
  #queued = new Map<number, Queue>();
  #queuedKeys = 0;
  #importing = false;
  #importLoop: Promise<void> = Promise.resolve();
  #leaving: Promise<void> = Promise.resolve();
  #left = false;
  /** Ends the keys' gathering now (a node leaving stores what it holds at once). */
  #endGather: (() => void) | undefined;
  #stopped = false;

  constructor(options: ImportedKeysOptions) {
    this.#o = options;
  }

  /** Joins this DC's queue group for other DCs' keys (not with no room for any: it announces so). */
  start(): void {
    if (this.#sub !== undefined || this.#o.maxQueued === 0) return;
    this.#sub = this.#o.bus.subscribe(
      KEYS_SUBJECTS,
      (data, subject) => {
        // This DC's own keys, which its store has: dropped unread.
        if (keysSubjectDc(subject) !== this.#o.dc) this.#received(data);
      },
      { queue: `lc-keys-${this.#o.dc}` },
    );
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

  /** Leaves the group; keys still queued are dropped (counted, not acknowledged), and no store call follows. */
  stop(): void {
    this.leave();
    this.#stopped = true;
    if (this.#queuedKeys > 0) this.#o.metrics.keysAcrossDcs.inc({ outcome: "dropped" }, this.#queuedKeys);
    this.#queued = new Map();
    this.#queuedKeys = 0;
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
    // or DCs that disagree on LIVECOUNT_PARTITIONS (acknowledged all the same: sent again, the same).
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
    const from: Received | undefined =
      msg.node !== undefined && msg.epoch !== undefined && msg.seq !== undefined
        ? { dc: msg.dc, node: msg.node, epoch: msg.epoch, seq: msg.seq, left: keys.length }
        : undefined;
    if (keys.length === 0) {
      if (from !== undefined) this.#ack([from]);
      return;
    }
    // A message is taken whole or not at all (it comes again, unacknowledged, and a part stored
    // would be stored again); one larger than the whole queue goes into an empty one.
    if (this.#queuedKeys > 0 && this.#queuedKeys + keys.length > maxQueued) {
      metrics.keysAcrossDcs.inc({ outcome: "dropped" }, keys.length);
      return;
    }
    let queue = this.#queued.get(msg.partition);
    if (queue === undefined) this.#queued.set(msg.partition, (queue = { keys: [], from: [] }));
    for (const key of keys) {
      queue.keys.push(key);
      queue.from.push(from);
    }
    this.#queuedKeys += keys.length;
    if (!this.#importing) this.#importLoop = this.#import();
  }

  /** One store call at a time, each with up to IMPORT_BATCH of the keys queued by then. */
  async #import(): Promise<void> {
    const { store, keyTtlMs, metrics, logger } = this.#o;
    this.#importing = true;
    try {
      await this.#gathered();
      while (this.#queuedKeys > 0 && !this.#stopped) {
        const { batch, from, count } = this.#take(IMPORT_BATCH);
        try {
          const stored = await store.importKeys(batch, keyTtlMs);
          if (stored > 0) metrics.keysAcrossDcs.inc({ outcome: "stored" }, stored);
          if (count > stored) metrics.keysAcrossDcs.inc({ outcome: "kept" }, count - stored);
          const done: Received[] = [];
          for (const received of from)
            if (received !== undefined && --received.left === 0) done.push(received);
          this.#ack(done);
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

  /** Acknowledges stored messages to their senders, one KeysAck per sending process. */
  #ack(done: readonly Received[]): void {
    const bySender = new Map<string, { dc: string; node: string; epoch: number; seqs: number[] }>();
    for (const r of done) {
      const sender = `${r.dc}.${r.node}.${r.epoch}`;
      let acks = bySender.get(sender);
      if (acks === undefined)
        bySender.set(sender, (acks = { dc: r.dc, node: r.node, epoch: r.epoch, seqs: [] }));
      acks.seqs.push(r.seq);
    }
    for (const { dc, node, epoch, seqs } of bySender.values())
      for (let i = 0; i < seqs.length; i += MAX_ACKED) {
        const ack: KeysAck = { type: "keysack", dc: this.#o.dc, epoch, seqs: seqs.slice(i, i + MAX_ACKED) };
        try {
          this.#o.bus.publish(keysAckSubject(dc, node), encodeMessage(ack));
        } catch (err) {
          // Not acknowledged: the sender sends the keys again, and they are kept.
          this.#logs.log(this.#o.logger, "warn", { err, dc, node }, "could not acknowledge idempotency keys");
        }
      }
  }

  /** Waits while keys gather (ImportedKeysOptions.gather); leaving ends the wait. */
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

  /** Takes up to `limit` queued keys, oldest partitions first, with the messages they came in. */
  #take(limit: number): {
    batch: Map<number, KeyRestore[]>;
    from: Array<Received | undefined>;
    count: number;
  } {
    const batch = new Map<number, KeyRestore[]>();
    const from: Array<Received | undefined> = [];
    let count = 0;
    for (const [partition, queue] of this.#queued) {
      const all = queue.keys.length <= limit - count;
      const taken = all ? queue.keys : queue.keys.splice(0, limit - count);
      const takenFrom = all ? queue.from : queue.from.splice(0, taken.length);
      batch.set(partition, taken);
      for (const f of takenFrom) from.push(f);
      count += taken.length;
      if (all) this.#queued.delete(partition);
      if (count === limit) break;
    }
    this.#queuedKeys -= count;
    return { batch, from, count };
  }
}
