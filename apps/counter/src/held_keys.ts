import type { KeysTaken } from "@livecount/cluster";
import type { Clock } from "@livecount/runtime";
import { AckWait } from "./ack_wait.js";

/** A keys message as it was published: sent again byte for byte. */
export interface SentKeys {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly keys: number;
}

interface Held extends SentKeys {
  /** Its number in this process (AppliedKeys.seq): what acknowledgements name. */
  readonly seq: number;
  /** When it was first sent (monotonic ms): never held past the keys' TTL from then. */
  readonly at: number;
  /** When it was last sent (monotonic ms), and how often so far. */
  sentAt: number;
  tries: number;
  /** The DCs that acknowledged it, a bit each (DcState.bit). */
  ackedBy: number;
  /** The DCs it is owed to (one came back, or asked): sent again at the next chance. */
  owedTo: number;
}

/** A message sent again, as it was then: in flight until acknowledged, sent again, let go or `until`. */
interface InFlight {
  readonly keys: number;
  readonly until: number;
}

interface DcState {
  /** Its bit in Held.ackedBy; -1 past the bits a number holds (held for by time, as if it did not acknowledge). */
  readonly bit: number;
  /** Since when it is down, or was never heard (monotonic ms); undefined while up. */
  downSince: number | undefined;
}

export interface HeldKeysOptions {
  readonly clock: Clock;
  /** LIVECOUNT_PEER_DCS but this one: held for from the start, heard yet or not. */
  readonly peers: readonly string[];
  /** What a DC's nodes do with other DCs' keys (DcLiveness.keysTaken). */
  readonly keysTaken: (dc: string) => KeysTaken;
  /**
   * Whether the node is within its discovery window: a DC not heard yet may be heard any moment, so
   * a message is also kept `keepMs` (it goes again when that DC is heard).
   */
  readonly discovering: () => boolean;
  /**
   * How long a message waits for an acknowledgement before it goes again, at least (longer while
   * acknowledgements take longer); each try waits twice as long, up to 16 times this.
   */
  readonly ackWaitMs: number;
  /**
   * How long a message is held for a live DC whose nodes do not acknowledge (a release before that):
   * a DC cut off meanwhile is found down (its lease lapses) or shows a gap in its heartbeats within
   * it. Asked at each expiry: it follows the longest lease the DCs announce.
   */
  readonly keepMs: () => number;
  /** LIVECOUNT_IDEMPOTENCY_TTL_S: never held past it (the keys are gone everywhere by then). */
  readonly ttlMs: number;
  /** LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS: keys held at most, the oldest dropped first; 0 holds none. */
  readonly maxKeys: number;
}

/** Bits of a number that `|` and `&` keep: DCs past them are held for by time. */
const DC_BITS = 31;
/** What is owed to DCs past DC_BITS. */
const OWED_PAST_BITS = 1 << DC_BITS;
/**
 * Keys sent again at once at most (a resend of a whole cut's keys goes over several ticks): one
 * synchronous loop of publishes holds up the node, and 5,000 keys are some 0.1 s of a receiving
 * node's imports (about 20 µs a key, `loadtest/bench/key_import.js`); what it cannot take it does
 * not acknowledge, and gets again later.
 */
export const RESEND_BUDGET_KEYS = 5000;
/**
 * Keys sent again that may still be waiting for their acknowledgements, at most: further resends
 * wait for acknowledgements to come back. A DC back from a cut is owed the whole cut's keys, and a
 * budget every heartbeat outran what its nodes import beside a heal's merges: their queues filled,
 * acknowledgements came late, and each late one sent a copy: each DC of heal-100k sent 290,000 to
 * 361,000 keys again for the cut's 100,000 (docs/benchmarks.md, "Keys sent again as
 * acknowledgements come back").
 */
export const RESEND_WINDOW_KEYS = 4 * RESEND_BUDGET_KEYS;

/**
 * The idempotency keys this node sent, held until every other DC acknowledged them: NATS drops what
 * a cut link cannot carry, a receiving node may die or fall behind with messages in hand, and keys
 * are in no durable state that anti-entropy compares. The node of another DC that stored a message's
 * keys acknowledges it (KeysAck); what is not acknowledged goes again once `ackWaitMs` passed, or as
 * long as acknowledgements have been taking (twice as long each try, up to 16 times `ackWaitMs`), and
 * at once when that DC comes back up, shows a gap, or asks: a budget at a time, and no more while
 * RESEND_WINDOW_KEYS sent again wait for their acknowledgements.
 * Every DC heard since the start, or listed as a peer, must acknowledge; one down is sent nothing
 * until it is up, and one down for the keys' TTL is forgotten. DCs of a release that does not
 * acknowledge are held for by time (`keepMs` while up, until back while down); DCs that take no keys
 * are not held for. At most `maxKeys`, the oldest dropped first (counted lost when a DC had not
 * acknowledged them), never past the keys' TTL. The memory is this process's: a node that restarts
 * holds nothing from before.
 */
export class HeldKeys {
  readonly #o: HeldKeysOptions;
  /** By number, in the order first sent (numbers only grow): the oldest first. */
  readonly #held = new Map<number, Held>();
  #keys = 0;
  /** Some message may still be owed to a DC (a resend stopped at the budget). */
  #owes = false;
  readonly #dcs = new Map<string, DcState>();
  #bits = 0;
  /**
   * Messages sent again and not yet acknowledged by every DC that acknowledges, by number, and their
   * keys: looked over whole before each resend (a DC's nodes acknowledge in any order), so one
   * acknowledged, sent again since, let go or past its wait leaves at once.
   */
  readonly #inFlight = new Map<number, InFlight>();
  #inFlightKeys = 0;
  /** How long a message waits for its acknowledgement, from how long they have been taking. */
  readonly #ackWait: AckWait;

  constructor(options: HeldKeysOptions) {
    this.#o = options;
    this.#ackWait = new AckWait(options.ackWaitMs);
    const now = options.clock.monotonic();
    for (const dc of options.peers) this.#dc(dc).downSince = now;
  }

  /** Keys held now. */
  get keys(): number {
    return this.#keys;
  }

  /** Whether `dc` is held for: a peer, or heard since the start and not gone for the keys' TTL. */
  knows(dc: string): boolean {
    return this.#dcs.has(dc);
  }

  /**
   * Holds message `seq`, just sent. Returns the keys of older messages dropped past `maxKeys` that
   * some DC had not acknowledged: it may never get them.
   */
  add(sent: SentKeys, seq: number): number {
    if (this.#o.maxKeys === 0) return 0;
    const now = this.#o.clock.monotonic();
    this.#expire(now);
    // A copy of its own: the encoder hands out views into buffers it shares between messages, and
    // a view held keeps its whole buffer.
    const data = new Uint8Array(sent.data);
    const held: Held = {
      subject: sent.subject,
      data,
      keys: sent.keys,
      seq,
      at: now,
      sentAt: now,
      tries: 1,
      ackedBy: 0,
      owedTo: 0,
    };
    // No DC needs it (every DC known takes no keys).
    if (this.#settled(held, now)) return 0;
    this.#held.set(seq, held);
    this.#keys += sent.keys;
    let lost = 0;
    for (const oldest of this.#held.values()) {
      if (this.#keys <= this.#o.maxKeys) break;
      this.#drop(oldest);
      if (!this.#settled(oldest, now)) lost += oldest.keys;
    }
    return lost;
  }

  /**
   * `dc` stored messages `seqs` of this process: what every DC acknowledged is let go. From a DC not
   * held for, nothing (whether a DC is up or down is DcLiveness's to say).
   */
  acked(dc: string, seqs: readonly number[]): void {
    const state = this.#dcs.get(dc);
    if (state === undefined || state.bit < 0) return;
    const bit = 1 << state.bit;
    const now = this.#o.clock.monotonic();
    for (const seq of seqs) {
      const held = this.#held.get(seq);
      if (held === undefined) continue;
      // Sent once: how long its acknowledgement took is known (one sent again could answer either).
      if (held.tries === 1 && (held.ackedBy & bit) === 0) this.#ackWait.took(now - held.sentAt);
      held.ackedBy |= bit;
      held.owedTo &= ~bit;
    }
    this.#expire(now);
  }

  /**
   * What is owed to a DC, and what has waited long enough for an acknowledgement from a live DC that
   * acknowledges, to send again now (at most RESEND_BUDGET_KEYS; the rest at the next call).
   */
  due(): SentKeys[] {
    const now = this.#o.clock.monotonic();
    this.#expire(now);
    const waiting = this.#waitingMask();
    // Nothing owed and no DC to wait for (every one down, or none acknowledges): nothing to look at.
    if (waiting === 0 && !this.#owes) return [];
    return this.#sendAgain(
      now,
      (m) =>
        m.owedTo !== 0 ||
        (waiting !== 0 &&
          (m.ackedBy & waiting) !== waiting &&
          now - m.sentAt >= this.#ackWait.afterTries(m.tries)),
    );
  }

  /**
   * `dc` is up again, its heartbeats showed a gap, or it asked: what it has not acknowledged (to a
   * DC that does not acknowledge, everything held) is owed to it, sent now up to RESEND_BUDGET_KEYS
   * and the rest by `due`. Every DC takes it (one subject for all) and stores only keys it lacks.
   */
  missedBy(dc: string, up = true): SentKeys[] {
    const now = this.#o.clock.monotonic();
    // What was held while it was down is let go only once it went to it again.
    this.#expire(now);
    const state = this.#dc(dc);
    // Whether it is up is DcLiveness's to say: a request from it may be late.
    if (up) state.downSince = undefined;
    const taken = this.#o.keysTaken(dc);
    if (taken === "off") return [];
    const bit = state.bit >= 0 ? 1 << state.bit : OWED_PAST_BITS;
    const acks = taken === "acks" && state.bit >= 0;
    for (const m of this.#held.values()) {
      if (acks && (m.ackedBy & bit) !== 0) continue;
      m.owedTo |= bit;
      // What a DC that acknowledges shows it lacks is no longer waited for: it goes again now.
      if (acks) this.#landed(m.seq);
    }
    this.#owes = this.#held.size > 0;
    return this.#sendAgain(now, (m) => m.owedTo !== 0);
  }

  /**
   * A remote DC went down: nothing goes to it until it is up, and what it did not acknowledge is held
   * until then, or until it has been down for the keys' TTL (a DC removed from the deployment is never
   * up again).
   */
  down(dc: string): void {
    const now = this.#o.clock.monotonic();
    this.#dc(dc).downSince ??= now;
    this.#expire(now);
  }

  /**
   * The node stops: returns the keys an acknowledging DC had not acknowledged past the first wait (or,
   * down, at all), lost with this process. One still in its first wait was most likely stored; a DC
   * that does not acknowledge cannot say.
   */
  release(): number {
    const now = this.#o.clock.monotonic();
    let lost = 0;
    for (const m of this.#held.values()) {
      for (const [dc, state] of this.#dcs) {
        if (state.bit < 0 || this.#o.keysTaken(dc) !== "acks" || (m.ackedBy & (1 << state.bit)) !== 0)
          continue;
        if (state.downSince !== undefined || now - m.at >= this.#ackWait.firstMs) {
          lost += m.keys;
          break;
        }
      }
    }
    this.#held.clear();
    this.#keys = 0;
    this.#inFlight.clear();
    this.#inFlightKeys = 0;
    return lost;
  }

  #dc(dc: string): DcState {
    let state = this.#dcs.get(dc);
    if (state === undefined) {
      state = { bit: this.#bits < DC_BITS ? this.#bits++ : -1, downSince: undefined };
      this.#dcs.set(dc, state);
    }
    return state;
  }

  /** Whether some DC is held for by time: it takes keys and does not acknowledge them (or is past the bits). */
  #anyByTime(): boolean {
    for (const [dc, state] of this.#dcs) {
      const taken = this.#o.keysTaken(dc);
      if (taken !== "off" && (taken !== "acks" || state.bit < 0)) return true;
    }
    return false;
  }

  /** The bits of the DCs that are up and acknowledge. */
  #waitingMask(): number {
    let mask = 0;
    for (const [dc, state] of this.#dcs)
      if (state.bit >= 0 && state.downSince === undefined && this.#o.keysTaken(dc) === "acks")
        mask |= 1 << state.bit;
    return mask;
  }

  /**
   * Lets go of the messages in flight acknowledged by every DC that acknowledges and is up (`waiting`),
   * let go, or past their wait.
   */
  #settleInFlight(now: number, waiting: number): void {
    for (const [seq, e] of this.#inFlight) {
      const m = this.#held.get(seq);
      if (m !== undefined && (m.ackedBy & waiting) !== waiting && now < e.until) continue;
      this.#landed(seq);
    }
  }

  /** Message `seq` is no longer in flight. */
  #landed(seq: number): void {
    const e = this.#inFlight.get(seq);
    if (e === undefined) return;
    this.#inFlight.delete(seq);
    this.#inFlightKeys -= e.keys;
  }

  /**
   * The held messages `again` picks, oldest first, up to the budget: sent again now. What is owed
   * past the budget waits for the next call.
   */
  #sendAgain(now: number, again: (m: Held) => boolean): SentKeys[] {
    const picked: Held[] = [];
    let keys = 0;
    const waiting = this.#waitingMask();
    this.#settleInFlight(now, waiting);
    let deferred = false;
    // Only DCs held for by time can be owed what every DC that acknowledges has: with none, a full
    // window ends the look.
    const byTime = this.#anyByTime();
    for (const m of this.#held.values()) {
      if (keys >= RESEND_BUDGET_KEYS) return picked;
      if (!again(m)) continue;
      // One a DC will acknowledge waits while the window is full; to DCs that do not, the budget paces.
      const acknowledged = (m.ackedBy & waiting) === waiting;
      if (!acknowledged && this.#inFlightKeys >= RESEND_WINDOW_KEYS) {
        deferred = true;
        if (byTime) continue;
        break;
      }
      m.sentAt = now;
      m.tries++;
      m.owedTo = 0;
      picked.push(m);
      keys += m.keys;
      // Sent again while in flight (past its wait, or owed once more): counted once, from now.
      this.#landed(m.seq);
      if (acknowledged) continue;
      this.#inFlight.set(m.seq, { keys: m.keys, until: now + this.#ackWait.afterTries(m.tries) });
      this.#inFlightKeys += m.keys;
    }
    // What waits for room is looked for again at the next call, owed or not.
    this.#owes = deferred;
    return picked;
  }

  /**
   * Whether every DC held for acknowledged `m`, or, if it does not acknowledge, had long enough. With
   * none known yet, or in the node's discovery window, also kept `keepMs` for a DC heard meanwhile.
   */
  #settled(m: Held, now: number): boolean {
    // keepMs() looks at every DC's lease: asked only where time decides.
    const kept = (): boolean => m.sentAt <= now - this.#o.keepMs();
    if (this.#dcs.size === 0) return kept();
    if (this.#o.discovering() && !kept()) return false;
    for (const [dc, state] of this.#dcs) {
      const taken = this.#o.keysTaken(dc);
      if (taken === "off") continue;
      if (taken === "acks" && state.bit >= 0) {
        if ((m.ackedBy & (1 << state.bit)) === 0) return false;
      } else if (state.downSince !== undefined || !kept()) return false;
    }
    return true;
  }

  /** Lets go of what every DC acknowledged, or what is past the keys' TTL; forgets DCs gone that long. */
  #expire(now: number): void {
    const { ttlMs } = this.#o;
    for (const [dc, state] of this.#dcs)
      if (state.downSince !== undefined && state.downSince < now - ttlMs) this.#dcs.delete(dc);
    for (const m of this.#held.values()) {
      if (m.at >= now - ttlMs && !this.#settled(m, now)) break;
      this.#drop(m);
    }
  }

  #drop(m: Held): void {
    this.#held.delete(m.seq);
    this.#keys -= m.keys;
  }
}
