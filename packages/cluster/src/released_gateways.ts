/**
 * The gateway incarnations an owner let go (superseded, found gone, lapsed, said `down`), kept so
 * that what a NATS server passes on late from one of them does not bring it back: such a message
 * was sent before the release, and its viewers must not count again. One let go without saying
 * `down` may still run (it stalled, or its bus blipped while it was probed): it is taken back once
 * it answers a probe (`readmit`), and what it sends after that counts. Pure state: time comes in
 * as arguments.
 */

/**
 * How long a release is remembered, in ms: longer than a NATS server stays frozen before its
 * clients have all left it and an operator restarted it (`LivecountNatsServerStuck` fires within a
 * minute). A message later than this re-creates its incarnation until its lease lapses.
 */
export const RELEASED_MEMORY_MS = 10 * 60_000;

/**
 * At most this many releases are remembered; past it the oldest is forgotten first. Every restart
 * and stall of a DC's gateways within RELEASED_MEMORY_MS takes one, for a few dozen bytes: even a
 * DC of a thousand gateways restarted four times over fits.
 */
export const RELEASED_MEMORY_CAP = 4096;

/** What an owner does with a message of a released incarnation. */
export type Released =
  /** It said it stopped: nothing it sends counts again, and nothing need be asked. */
  | "down"
  /** It may still run: refused until it answers a probe. */
  | "unproven";

interface Release {
  readonly at: number;
  readonly down: boolean;
  /** A probe at most every `intervalMs` (its heartbeat interval): a late backlog asks once. */
  readonly intervalMs: number;
  probedAt: number;
}

export class ReleasedGateways {
  /** In the order released: the oldest first. */
  readonly #released = new Map<string, Release>();

  constructor(
    private readonly memoryMs = RELEASED_MEMORY_MS,
    private readonly cap = RELEASED_MEMORY_CAP,
  ) {}

  /** `gateway` was let go at `now`; `down` when it said so itself. */
  add(gateway: string, now: number, down: boolean, intervalMs: number): void {
    this.#released.delete(gateway);
    this.#released.set(gateway, { at: now, down, intervalMs, probedAt: -Infinity });
    for (const oldest of this.#released.keys()) {
      if (this.#released.size <= this.cap) break;
      this.#released.delete(oldest);
    }
  }

  /** Whether `gateway` was let go, and how; undefined when it was not (or that is forgotten). */
  of(gateway: string): Released | undefined {
    const release = this.#released.get(gateway);
    if (release === undefined) return undefined;
    return release.down ? "down" : "unproven";
  }

  /** Whether to ask `gateway` now whether it still runs: it may, and was not asked within an interval. */
  shouldProbe(gateway: string, now: number): boolean {
    const release = this.#released.get(gateway);
    if (release === undefined || release.down || now - release.probedAt < release.intervalMs) return false;
    release.probedAt = now;
    return true;
  }

  /** `gateway` answered a probe: it runs, and what it sends from now on counts. */
  readmit(gateway: string): void {
    const release = this.#released.get(gateway);
    if (release !== undefined && !release.down) this.#released.delete(gateway);
  }

  /** Forgets the releases older than the memory at `now`. */
  prune(now: number): void {
    for (const [gateway, { at }] of this.#released) {
      if (at + this.memoryMs > now) break;
      this.#released.delete(gateway);
    }
  }

  get size(): number {
    return this.#released.size;
  }
}
