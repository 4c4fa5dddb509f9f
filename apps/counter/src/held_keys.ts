import type { Clock } from "@livecount/runtime";

/** A keys message as it was published: sent again byte for byte. */
export interface SentKeys {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly keys: number;
}

interface Held extends SentKeys {
  /** When it was first sent (monotonic ms): never held past the keys' TTL from then. */
  readonly at: number;
  /** This node's last heartbeat number when it was last sent: it crossed with the heartbeats after. */
  stamp: number;
  /** When it was last sent (monotonic ms), for DCs that do not say what they heard. */
  sentAt: number;
  /** The DCs that heard it since it was last sent, a bit each (DcState.bit). */
  heardBy: number;
}

interface DcState {
  /** Its bit in Held.heardBy; -1 past the bits a number holds (held for by time, as if it said nothing). */
  readonly bit: number;
  /** Its nodes say what they heard of this one (older releases do not: held for by time). */
  reporting: boolean;
  /** Since when it is down, or was never heard (monotonic ms); undefined while up. */
  downSince: number | undefined;
  /** Every message held before this index was heard by it (or sent again since, further on). */
  cursor: number;
}

/** Heartbeats `from..to` of this node that a node of another DC heard, none missed between (DcLiveness). */
export interface HeardRun {
  readonly from: number;
  readonly to: number;
}

export interface HeldKeysOptions {
  readonly clock: Clock;
  /** The number of this node's last DC heartbeat (DcLiveness.lastSeq). */
  readonly stamp: () => number;
  /** LIVECOUNT_PEER_DCS but this one: held for from the start, heard yet or not. */
  readonly peers: readonly string[];
  /**
   * How long a message is held for a live DC whose nodes do not say what they heard (a release
   * before that): a DC cut off meanwhile is found down (its lease lapses) or shows a gap in its
   * heartbeats within it. Asked at each expiry: it follows the longest lease the DCs announce.
   */
  readonly keepMs: () => number;
  /** LIVECOUNT_IDEMPOTENCY_TTL_S: never held past it (the keys are gone everywhere by then). */
  readonly ttlMs: number;
  /** LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS: keys held at most, the oldest dropped first; 0 holds none. */
  readonly maxKeys: number;
}

/** Bits of a number that `|` and `&` keep: DCs past them are held for by time. */
const DC_BITS = 31;

/**
 * The idempotency keys this node sent, held until every other DC heard them: NATS drops what a cut
 * link cannot carry, and keys are in no durable state that anti-entropy compares. A DC's counter
 * nodes say in their heartbeats which of this node's heartbeats they heard without a gap (DcLiveness);
 * one connection carries this node's heartbeats and messages in order, so a message sent between two
 * heartbeats of such a run reached that DC. Every DC heard since the start, or listed as a peer,
 * must hear a message; one that shows it missed some (its run starts after them) gets them again.
 * At most `maxKeys`, the oldest dropped first (counted lost when a DC had not heard them), never
 * past the keys' TTL. The memory is this process's: a node that restarts holds nothing from before.
 */
export class HeldKeys {
  readonly #o: HeldKeysOptions;
  /** In the order of their stamps, from `#head` on; a message sent again leaves a hole and goes last. */
  #held: Array<Held | undefined> = [];
  #head = 0;
  #keys = 0;
  readonly #dcs = new Map<string, DcState>();
  #bits = 0;

  constructor(options: HeldKeysOptions) {
    this.#o = options;
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
   * Holds a message just sent. Returns the keys of older messages dropped past `maxKeys` that some DC
   * had not heard: it may never get them.
   */
  add(sent: SentKeys): number {
    if (this.#o.maxKeys === 0) return 0;
    const now = this.#o.clock.monotonic();
    this.#expire(now);
    // A copy of its own: the encoder hands out views into buffers it shares between messages, and
    // a view held keeps its whole buffer.
    const data = new Uint8Array(sent.data);
    this.#held.push({
      subject: sent.subject,
      data,
      keys: sent.keys,
      at: now,
      stamp: this.#o.stamp(),
      sentAt: now,
      heardBy: 0,
    });
    this.#keys += sent.keys;
    let lost = 0;
    while (this.#keys > this.#o.maxKeys && this.#head < this.#held.length) {
      const dropped = this.#held[this.#head];
      this.#drop();
      if (dropped !== undefined && !this.#settled(dropped, now)) lost += dropped.keys;
    }
    this.#compact();
    return lost;
  }

  /**
   * What the nodes of `dc` heard of this node lately (DcLiveness's heard listener): what it heard is
   * let go once every DC did, and what it missed (sent before every run of its nodes starts) is
   * returned, to send again.
   */
  heard(dc: string, runs: readonly HeardRun[]): SentKeys[] {
    const now = this.#o.clock.monotonic();
    const state = this.#dc(dc);
    state.reporting = true;
    state.downSince = undefined;
    if (runs.length === 0 || state.bit < 0) return [];
    const bit = 1 << state.bit;
    let firstFrom = Infinity;
    let lastTo = 0;
    for (const run of runs) {
      firstFrom = Math.min(firstFrom, run.from);
      lastTo = Math.max(lastTo, run.to);
    }
    const missed: Held[] = [];
    let cursor = -1;
    let i = Math.max(state.cursor, this.#head);
    for (; i < this.#held.length; i++) {
      const m = this.#held[i];
      if (m === undefined || (m.heardBy & bit) !== 0) continue;
      // Sent after the last heartbeat any of its nodes heard: not yet known either way, nor is any after.
      if (m.stamp >= lastTo) break;
      if (runs.some((run) => run.from <= m.stamp && m.stamp < run.to)) m.heardBy |= bit;
      else if (m.stamp < firstFrom) {
        missed.push(m);
        this.#held[i] = undefined;
      } else if (cursor < 0) cursor = i;
    }
    state.cursor = cursor < 0 ? i : cursor;
    const again = this.#sendAgain(missed, now);
    this.#expire(now);
    return again;
  }

  /**
   * `dc` is up again, its heartbeats showed a gap, or it asked. A DC that says what it heard gets
   * what it missed once its heartbeats show it (`heard`): nothing now. To one that does not,
   * everything held, to send again. Every DC takes them (one subject for all), and stores only keys
   * it lacks.
   */
  missedBy(dc: string): SentKeys[] {
    const now = this.#o.clock.monotonic();
    const state = this.#dc(dc);
    state.downSince = undefined;
    if (state.reporting && state.bit >= 0) return [];
    const missed: Held[] = [];
    for (let i = this.#head; i < this.#held.length; i++) {
      const m = this.#held[i];
      if (m === undefined) continue;
      missed.push(m);
      this.#held[i] = undefined;
    }
    state.cursor = this.#held.length;
    const again = this.#sendAgain(missed, now);
    this.#expire(now);
    return again;
  }

  /**
   * A remote DC went down: held for until it is up and heard it all, or until it has been down for
   * the keys' TTL (a DC removed from the deployment is never up again).
   */
  down(dc: string): void {
    const now = this.#o.clock.monotonic();
    this.#dc(dc).downSince ??= now;
    this.#expire(now);
  }

  #dc(dc: string): DcState {
    let state = this.#dcs.get(dc);
    if (state === undefined) {
      const bit = this.#bits < DC_BITS ? this.#bits++ : -1;
      state = { bit, reporting: false, downSince: undefined, cursor: this.#head };
      this.#dcs.set(dc, state);
    }
    return state;
  }

  /** Stamped anew and held last: every DC is to hear them again. */
  #sendAgain(missed: Held[], now: number): SentKeys[] {
    const stamp = this.#o.stamp();
    for (const m of missed) {
      m.stamp = stamp;
      m.sentAt = now;
      m.heardBy = 0;
      this.#held.push(m);
    }
    return missed;
  }

  /**
   * Whether every DC held for heard `m` (or, if it does not say what it heard, had long enough). With
   * none known yet (a node in its discovery window), kept `keepMs` for one heard meanwhile.
   */
  #settled(m: Held, now: number): boolean {
    if (this.#dcs.size === 0) return m.sentAt <= now - this.#o.keepMs();
    for (const state of this.#dcs.values()) {
      if (state.reporting && state.bit >= 0) {
        if ((m.heardBy & (1 << state.bit)) === 0) return false;
      } else if (state.downSince !== undefined || m.sentAt > now - this.#o.keepMs()) return false;
    }
    return true;
  }

  /** Lets go of what every DC heard, or what is past the keys' TTL; forgets DCs gone that long. */
  #expire(now: number): void {
    const { ttlMs } = this.#o;
    for (const [dc, state] of this.#dcs)
      if (state.downSince !== undefined && state.downSince < now - ttlMs) this.#dcs.delete(dc);
    while (this.#head < this.#held.length) {
      const m = this.#held[this.#head];
      if (m !== undefined && m.at >= now - ttlMs && !this.#settled(m, now)) break;
      this.#drop();
    }
    this.#compact();
  }

  #drop(): void {
    const dropped = this.#held[this.#head];
    this.#held[this.#head++] = undefined;
    if (dropped !== undefined) this.#keys -= dropped.keys;
  }

  #compact(): void {
    if (this.#head > 1024 && this.#head * 2 > this.#held.length) {
      this.#held = this.#held.slice(this.#head);
      for (const state of this.#dcs.values()) state.cursor = Math.max(0, state.cursor - this.#head);
      this.#head = 0;
    }
  }
}
