/**
 * Idempotency keys across data centers. A publisher whose change got no answer retries it with the
 * same key, and the retry may land in another DC (its first DC failed, or a global name resolved to
 * another). Each DC keeps its own keys, so that retry would count again. Here a partition's owner
 * sends the keys of the changes the store applied or replayed (once durable and published, with the
 * answers it gave; a replay RecentKeys answered from memory was sent when first applied) on
 * `lc.keys.<dc>.<partition>`, and one counter node of every other DC stores them (ImportedKeys). A
 * retry that arrives after the keys is answered as the change it repeats, whichever DC it reaches.
 *
 * NATS drops what a cut link cannot carry, and a receiving node may die or fall behind with messages
 * in hand: each message carries this node's name, a number its process drew at start and its own
 * number, the node that stored it acknowledges it (`lc.keysack.<dc>.<node>`), and the sender holds
 * what it sent (HeldKeys) until every DC did, sending again what waited too long and, at once, what a
 * DC missed when it comes back up, shows a gap in its heartbeats, or asks (`lc.keysmissed`).
 *
 * What it cannot do: a retry that reaches another DC before the keys (they leave as the change is
 * answered, at the link's latency), during a cut, in a DC rebuilt since (keys are not carried by
 * anti-entropy), after its sender restarted with keys a DC had not acknowledged, or one of keys
 * dropped past LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS (counted lost) counts again; an imported key is
 * not kept in the receiver's memory (RecentKeys), so a Redis there that restarts without its last
 * second loses the keys of that second.
 */
import { randomInt } from "node:crypto";
import {
  keysAckSubject,
  keysMissedFrom,
  keysMissedSubject,
  keysMissedSubjects,
  partitionKeysSubject,
  type Subscription,
} from "@livecount/bus";
import { MAX_APPLIED_KEYS, decodeMessage, encodeMessage, type AppliedKeys } from "@livecount/protocol";
import { LogThrottle, type TimerHandle } from "@livecount/runtime";
import type { KeyRestore } from "@livecount/store";
import { HeldKeys, type HeldKeysOptions, type SentKeys } from "./held_keys.js";
import { ImportedKeys, type ImportedKeysOptions } from "./imported_keys.js";

export { CLUSTER_IMPORT_GATHER_MS } from "./imported_keys.js";

/** How this node receives other DCs' keys (ImportedKeys), and how it sends its own. */
export interface KeyReplicationOptions extends ImportedKeysOptions {
  /** This node's id: where acknowledgements of its keys come (`lc.keysack.<dc>.<node>`). */
  readonly node: string;
  /** LIVECOUNT_IDEMPOTENCY_ACROSS_DCS. */
  readonly enabled: boolean;
  /**
   * Whether another data center may hear the keys: one was heard since the start (live or cut off
   * now: nothing is queued for it, NATS drops what no one hears), LIVECOUNT_PEER_DCS names one, or
   * the node is within its discovery window (one may be there, not heard yet).
   */
  readonly mayBeHeard: () => boolean;
  /** What is sent is held until every DC acknowledged it (HeldKeys); its clock runs the resends. */
  readonly held: HeldKeysOptions;
  /**
   * How often what waited too long for an acknowledgement is looked for, and a remote DC's triggers
   * of one kind within this long of the last (a DC heartbeat) sent again once: each of its counter
   * nodes' heartbeats shows the same gap, and each of its nodes asks.
   */
  readonly resendCoalesceMs: number;
}

export class KeyReplication {
  readonly #o: KeyReplicationOptions;
  readonly #logs = new LogThrottle();
  readonly #imported: ImportedKeys;
  /** Other DCs asking this node to send its held keys again (keysMissedSubjects). */
  #missedSub: Subscription | undefined;
  /** Other DCs acknowledging this node's keys (keysAckSubject). */
  #ackSub: Subscription | undefined;
  #resendTimer: TimerHandle | undefined;
  readonly #held: HeldKeys;
  /** When held keys were last sent again, per remote DC and cause (heard again, or asked). */
  readonly #resentAt = new Map<string, number>();
  /** Drawn at start: numbers of an earlier process under this node id are not this one's. */
  readonly #epoch = randomInt(2 ** 47);
  #seq = 0;

  constructor(options: KeyReplicationOptions) {
    this.#o = options;
    this.#held = new HeldKeys(options.held);
    this.#imported = new ImportedKeys(options);
  }

  /** Whether keys are sent now: the caller builds the records only then. */
  get sending(): boolean {
    return this.#o.enabled && this.#o.mayBeHeard();
  }

  /** Joins this DC's queue group for other DCs' keys, and hears acknowledgements and requests. */
  start(): void {
    const { enabled, bus, dc, node } = this.#o;
    if (!enabled || this.#ackSub !== undefined) return;
    this.#imported.start();
    this.#ackSub = bus.subscribe(keysAckSubject(dc, node), (data) => this.#onAck(data));
    this.#missedSub = bus.subscribe(keysMissedSubjects(dc), (_data, subject) => {
      const from = keysMissedFrom(subject);
      // Only a DC held for: any other name would be one more entry in #resentAt.
      if (from !== undefined && from !== dc && this.#held.knows(from)) this.#resend(from, "asked");
    });
    this.#scheduleResend();
  }

  /**
   * Leaves the group (a graceful stop): the DC's other nodes take the keys from now on, and what the
   * broker already sent this node is still taken (the subscription drains).
   */
  leave(): void {
    this.#imported.leave();
  }

  /** Resolves once every key this node holds went to the store (after `leave`, before it closes). */
  async drained(): Promise<void> {
    await this.#imported.drained();
  }

  /**
   * Leaves the group; keys still queued are dropped (counted), and no store call follows; keys sent
   * that some DC had not acknowledged are lost with the process (counted).
   */
  stop(): void {
    this.#imported.stop();
    this.#missedSub?.unsubscribe();
    this.#missedSub = undefined;
    this.#ackSub?.unsubscribe();
    this.#ackSub = undefined;
    if (this.#resendTimer !== undefined) this.#o.held.clock.clearTimeout(this.#resendTimer);
    this.#resendTimer = undefined;
    const lost = this.#held.release();
    if (lost > 0) this.#o.metrics.keysAcrossDcs.inc({ outcome: "lost" }, lost);
    this.#o.metrics.keysHeld.set(0);
  }

  /**
   * Sends the keys of changes answered on pages of each partition, MAX_APPLIED_KEYS a message. Never
   * throws: a key not sent reopens only the gap this closes (counted as unsent).
   */
  send(byPartition: ReadonlyMap<number, readonly KeyRestore[]>): void {
    if (!this.sending) return;
    const { dc, node, metrics } = this.#o;
    const tally = new KeyTally();
    try {
      for (const [partition, keys] of byPartition) {
        for (let from = 0; from < keys.length; from += MAX_APPLIED_KEYS) {
          const chunk = keys.slice(from, from + MAX_APPLIED_KEYS);
          const seq = ++this.#seq;
          const msg: AppliedKeys = {
            type: "keys",
            dc,
            partition,
            keys: chunk,
            node,
            epoch: this.#epoch,
            seq,
          };
          const sent: SentKeys = {
            subject: partitionKeysSubject(dc, partition),
            data: encodeMessage(msg),
            keys: chunk.length,
          };
          if (this.#publish(sent, tally)) tally.lost += this.#held.add(sent, seq);
        }
      }
    } finally {
      // What went before a failure is counted all the same.
      tally.count(metrics, "sent");
      metrics.keysHeld.set(this.#held.keys);
    }
  }

  /**
   * A remote DC went down, came back up, or showed a gap in its heartbeats (DcLiveness): what it did
   * not acknowledge goes to it again now (nothing while it is down), and it is asked to send its own
   * again (the other way of the link may come back later, each way being a connection of its own,
   * and the request arrives only once its keys can).
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

  #onAck(data: Uint8Array): void {
    let msg;
    try {
      msg = decodeMessage(data);
      if (msg.type !== "keysack") throw new Error(`a ${msg.type} message where acknowledgements go`);
    } catch (err) {
      this.#logs.log(
        this.#o.logger,
        "warn",
        { err },
        "malformed acknowledgement of idempotency keys dropped",
      );
      return;
    }
    // Of an earlier process under this node id, or from this DC: not this one's to let go.
    if (msg.epoch !== this.#epoch || msg.dc === this.#o.dc) return;
    this.#held.acked(msg.dc, msg.seqs);
    this.#o.metrics.keysHeld.set(this.#held.keys);
  }

  #scheduleResend(): void {
    const { clock } = this.#o.held;
    this.#resendTimer = clock.setTimeout(() => {
      this.#sendAgain("*", this.#held.due(), "unacknowledged");
      this.#scheduleResend();
    }, this.#o.resendCoalesceMs);
  }

  #resend(remote: string, why: "up" | "gap" | "asked"): void {
    // Hearing it again and being asked are told apart: one does not make the other needless (the
    // link's two ways heal apart), but several of one kind within a heartbeat say the same.
    const cause = `${why === "asked" ? "asked" : "heard"} ${remote}`;
    const now = this.#o.held.clock.monotonic();
    const last = this.#resentAt.get(cause);
    if (last !== undefined && now - last < this.#o.resendCoalesceMs) return;
    this.#resentAt.set(cause, now);
    this.#sendAgain(remote, this.#held.missedBy(remote, why !== "asked"), why);
  }

  #sendAgain(remote: string, missed: readonly SentKeys[], why: string): void {
    this.#o.metrics.keysHeld.set(this.#held.keys);
    const tally = new KeyTally();
    for (const sent of missed) this.#publish(sent, tally);
    tally.count(this.#o.metrics, "resent");
    if (missed.length > 0)
      this.#logs.log(
        this.#o.logger,
        "info",
        { dc: remote, keys: missed.reduce((sum, m) => sum + m.keys, 0), why },
        "idempotency keys sent again to DCs that may have missed them",
      );
  }

  /** Publishes one message of keys, tallied as sent or not. */
  #publish(sent: SentKeys, tally: KeyTally): boolean {
    const { bus, logger } = this.#o;
    try {
      bus.publish(sent.subject, sent.data);
      tally.sent += sent.keys;
      return true;
    } catch (err) {
      tally.unsent += sent.keys;
      this.#logs.log(
        logger,
        "warn",
        { err, subject: sent.subject },
        "idempotency keys not sent to other DCs",
      );
      return false;
    }
  }
}

/**
 * Keys sent, not sent and lost in one go, counted once at its end: a heal resends a cut's keys in as
 * many messages as the commits that answered them, and a labelled metric per message
 * took 0.18 s of a node's CPU in a heal of 100,000 pages (its profile).
 */
class KeyTally {
  sent = 0;
  unsent = 0;
  lost = 0;

  count(metrics: KeyReplicationOptions["metrics"], outcome: "sent" | "resent"): void {
    if (this.sent > 0) metrics.keysAcrossDcs.inc({ outcome }, this.sent);
    if (this.unsent > 0) metrics.keysAcrossDcs.inc({ outcome: "unsent" }, this.unsent);
    if (this.lost > 0) metrics.keysAcrossDcs.inc({ outcome: "lost" }, this.lost);
  }
}
