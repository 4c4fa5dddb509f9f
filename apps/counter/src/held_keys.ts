import type { Clock } from "@livecount/runtime";

/** A keys message as it was published: sent again byte for byte. */
export interface SentKeys {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly keys: number;
}

interface Held extends SentKeys {
  /** When it was sent (monotonic ms). */
  readonly at: number;
}

export interface HeldKeysOptions {
  readonly clock: Clock;
  /**
   * How long a message is held after it was sent while every DC is up: a DC cut off meanwhile is
   * found down (its lease lapses) or shows a gap in its heartbeats within it. Asked at each
   * expiry: it follows the longest lease the DCs announce.
   */
  readonly keepMs: () => number;
  /** LIVECOUNT_IDEMPOTENCY_TTL_S: never held past it (the keys are gone everywhere by then). */
  readonly ttlMs: number;
  /** LIVECOUNT_IDEMPOTENCY_RESEND_MAX_KEYS: keys held at most, the oldest dropped first; 0 holds none. */
  readonly maxKeys: number;
}

/**
 * The idempotency keys this node sent lately, so a DC that may have missed them gets them again
 * (KeyReplication): NATS drops what a cut link cannot carry, and keys are in no durable state that
 * anti-entropy compares. Held `keepMs` after sending; while some DC is down, until it is up again
 * (at most `maxKeys`, and never past the keys' TTL). The memory is this process's: a node that
 * restarts holds nothing from before.
 */
export class HeldKeys {
  readonly #o: HeldKeysOptions;
  /** Oldest first, from `#head` on (compacted now and then rather than shifted one by one). */
  #held: Array<Held | undefined> = [];
  #head = 0;
  #keys = 0;
  /** Remote DCs down now, and since when (monotonic ms). */
  readonly #down = new Map<string, number>();

  constructor(options: HeldKeysOptions) {
    this.#o = options;
  }

  /** Keys held now. */
  get keys(): number {
    return this.#keys;
  }

  /**
   * Holds a message just sent. Returns the keys of older messages dropped past `maxKeys` while a DC
   * is down: that DC may never get them.
   */
  add(sent: SentKeys): number {
    if (this.#o.maxKeys === 0) return 0;
    const now = this.#o.clock.monotonic();
    this.#expire(now);
    // A copy of its own: the encoder hands out views into buffers it shares between messages, and
    // a view held keeps its whole buffer.
    this.#held.push({ subject: sent.subject, data: new Uint8Array(sent.data), keys: sent.keys, at: now });
    this.#keys += sent.keys;
    let lost = 0;
    while (this.#keys > this.#o.maxKeys && this.#head < this.#held.length) {
      const dropped = this.#drop();
      if (this.#down.size > 0) lost += dropped;
    }
    this.#compact();
    return lost;
  }

  /**
   * A remote DC went down: what is held stays until it is up again, or until it has been down for
   * the keys' TTL (a DC removed from the deployment is never up again).
   */
  down(dc: string): void {
    const now = this.#o.clock.monotonic();
    this.#expire(now);
    if (!this.#down.has(dc)) this.#down.set(dc, now);
  }

  /**
   * A remote DC is up again, or its heartbeats showed a gap: every message held, to send again.
   * Every DC takes them again (one subject for all), and stores only keys it lacks.
   */
  missedBy(dc: string): SentKeys[] {
    // What was kept for it while it was down goes too; after this, what is older than keepMs goes.
    this.#expire(this.#o.clock.monotonic());
    this.#down.delete(dc);
    const held: SentKeys[] = [];
    for (let i = this.#head; i < this.#held.length; i++) held.push(this.#held[i]!);
    return held;
  }

  /** Drops what every DC has had long enough to get, or what is past the keys' TTL. */
  #expire(now: number): void {
    const { ttlMs } = this.#o;
    for (const [dc, since] of this.#down) if (since < now - ttlMs) this.#down.delete(dc);
    const keepFrom = this.#down.size > 0 ? now - ttlMs : now - Math.min(this.#o.keepMs(), ttlMs);
    while (this.#head < this.#held.length && this.#held[this.#head]!.at < keepFrom) this.#drop();
    this.#compact();
  }

  #drop(): number {
    const dropped = this.#held[this.#head]!;
    this.#held[this.#head++] = undefined;
    this.#keys -= dropped.keys;
    return dropped.keys;
  }

  #compact(): void {
    if (this.#head > 1024 && this.#head * 2 > this.#held.length) {
      this.#held = this.#held.slice(this.#head);
      this.#head = 0;
    }
  }
}
