import { DCS_SUBJECT, type Bus, type Subscription } from "@livecount/bus";
import { decodeMessage, encodeMessage, type DcHeartbeat } from "@livecount/protocol";
import type { Clock, Logger, TimerHandle } from "@livecount/runtime";
import { BusSilence, leaseFromAfterSilence, type BusHealth } from "./bus_pulse.js";

export interface DcLivenessOptions {
  readonly bus: Bus;
  readonly clock: Clock;
  readonly logger: Logger;
  /** This process's data center: always live. */
  readonly dc: string;
  /** A remote DC not heard for this long is down: its presence drops out of totals. */
  readonly leaseMs: number;
  /** How often heartbeats go out and leases are checked; short, so a healed link is seen at once. */
  readonly heartbeatMs: number;
  /** Counter nodes announce their DC under their node id; gateways only listen. */
  readonly announceAs?: string;
  /**
   * What an announcing node says in its heartbeats of other DCs' idempotency keys
   * (DcHeartbeat.acksKeys): true, it stores and acknowledges them; false, it takes none.
   */
  readonly acksKeys?: boolean;
  /** What an announcing node says in its heartbeats about purging (DcHeartbeat.purgeBefore; 0: nothing). */
  readonly purgeBefore?: () => number;
  /**
   * The broker's answers to this process (a BusPulse) and how long one may wait before the bus is
   * silent: while it is, no DC goes down (none could be heard), and once it carries again each DC's
   * lease gets back the part of the silence after it was last heard. Absent with the in-memory bus,
   * which is this process and is silent only when it is.
   */
  readonly silence?: { readonly health: BusHealth; readonly silenceMs: number };
}

/**
 * What happened to a remote DC:
 * - "up": heard for the first time, or again after being down;
 * - "gap": still up, but heartbeats were lost, so updates from it may have been lost too;
 * - "down": not heard for longer than its lease.
 * On "up" and "gap" the DCs compare digests of what they hold (anti-entropy): what was lost either
 * way comes back from durable state, however long the silence was.
 */
export type DcEvent = { readonly kind: "up" | "gap" | "down" };

export type DcListener = (dc: string, event: DcEvent) => void;

/**
 * What a DC's counter nodes do with other DCs' idempotency keys, as their heartbeats say: every node
 * heard within its lease acknowledges them ("acks"), takes none ("off"), or some say nothing (a
 * release before acknowledgements) or they disagree ("unknown").
 */
export type KeysTaken = "acks" | "off" | "unknown";

/**
 * How long a remote node's heartbeat number is kept after its DC was last heard without it: a node
 * back within that shows the heartbeats it missed as a gap (a resync); one back later, once another
 * id came from its DC, looks like a restart, and periodic anti-entropy (every 10 s by default) has
 * long covered what it missed. Node
 * ids are random per process by default, so without this every restart of a remote node would add
 * an entry for as long as this process runs. Measured against the DC's last heartbeat, not this
 * process's clock, so a silence of this process's bus or of the whole DC forgets nobody.
 */
export const NODE_MEMORY_MS = 10 * 60_000;

/** Times on the process's monotonic clock: a wall clock stepping back must not keep a DC up longer. */
interface RemoteDc {
  lastHeard: number;
  /**
   * Where its lease runs from: when it was last heard, moved later by silences of this process's
   * bus (which do not count against it). `lastHeard` stays the truth that lag and metrics report.
   */
  leaseFrom: number;
  leaseMs: number;
  live: boolean;
  /**
   * Last heartbeat sequence number per announcing node, and when (monotonic ms) it came. A node id
   * heard last NODE_MEMORY_MS before its DC was is forgotten when another id first comes from there.
   */
  readonly seqs: Map<string, { seq: number; at: number }>;
  /** What each node heard within its lease last said of keys (DcHeartbeat.acksKeys), and when (monotonic ms). */
  readonly keys: Map<string, { readonly acksKeys: boolean | undefined; readonly at: number }>;
  /** What they say together, as of its last heartbeat: kept while it is silent. */
  taken: KeysTaken;
}

/**
 * Which data centers are live, from heartbeats every counter node sends to every DC. A remote DC
 * silent for longer than its lease is down (its presence entries leave the totals, nothing is
 * deleted); heard again, it is up. Sequence numbers make a short cut visible too.
 */
export class DcLiveness {
  readonly #o: DcLivenessOptions;
  readonly #remotes = new Map<string, RemoteDc>();
  readonly #listeners = new Set<DcListener>();
  readonly #purgeListeners = new Set<(before: number) => void>();
  #seq = 0;
  readonly #silence: BusSilence | undefined;
  #sub: Subscription | undefined;
  #timer: TimerHandle | undefined;

  constructor(options: DcLivenessOptions) {
    this.#o = options;
    this.#silence =
      options.silence === undefined
        ? undefined
        : new BusSilence(options.silence.health, options.silence.silenceMs);
  }

  start(): void {
    this.#sub = this.#o.bus.subscribe(DCS_SUBJECT, (data) => this.#onMessage(data));
    this.#tick();
  }

  stop(): void {
    this.#sub?.unsubscribe();
    if (this.#timer !== undefined) this.#o.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  onChange(listener: DcListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Heartbeats asking to purge tombstones older than a time, from any node of any DC (this one's too). */
  onPurgeAsked(listener: (before: number) => void): () => void {
    this.#purgeListeners.add(listener);
    return () => this.#purgeListeners.delete(listener);
  }

  isLive(dc: string): boolean {
    return dc === this.#o.dc || this.#remotes.get(dc)?.live === true;
  }

  /** This process's data center. */
  get localDc(): string {
    return this.#o.dc;
  }

  /** True once any other data center has been heard. */
  get hasRemotes(): boolean {
    return this.#remotes.size > 0;
  }

  /**
   * The longest DC lease in the deployment as heard: this DC's, or a remote's it advertises in its
   * heartbeats (live or down now). This process finds a remote DC down only after that DC's lease,
   * so what must outlast an unnoticed cut of any link must last this long.
   */
  longestLeaseMs(): number {
    let longest = this.#o.leaseMs;
    for (const remote of this.#remotes.values()) longest = Math.max(longest, remote.leaseMs);
    return longest;
  }

  /**
   * What `dc`'s counter nodes do with other DCs' keys, as those heard within its lease said at its
   * last heartbeat (unchanged while it is silent or down; unknown if never heard).
   */
  keysTaken(dc: string): KeysTaken {
    return this.#remotes.get(dc)?.taken ?? "unknown";
  }

  /** Takes what a node of `remote` says of keys, and what its nodes say together now. */
  #sayKeys(remote: RemoteDc, node: string, acksKeys: boolean | undefined, now: number): void {
    remote.keys.set(node, { acksKeys, at: now });
    let acks = 0;
    let off = 0;
    let silent = 0;
    for (const [other, said] of remote.keys) {
      // A node not heard within the lease is gone (a restart under a new id) or cut off alone.
      if (said.at < now - remote.leaseMs) remote.keys.delete(other);
      else if (said.acksKeys === true) acks++;
      else if (said.acksKeys === false) off++;
      else silent++;
    }
    remote.taken = silent > 0 || (acks > 0 && off > 0) ? "unknown" : acks > 0 ? "acks" : "off";
  }

  /** Remote DCs live right now. */
  liveRemotes(): string[] {
    return [...this.#remotes].filter(([, r]) => r.live).map(([dc]) => dc);
  }

  /**
   * Every remote DC heard since this process started: live or down, and when it was last heard
   * (epoch-ms: how long ago by the monotonic clock, back from the wall clock's now).
   */
  remotes(): Array<{ readonly dc: string; readonly live: boolean; readonly lastHeard: number }> {
    const { clock } = this.#o;
    const wallMinusMonotonic = clock.now() - clock.monotonic();
    return [...this.#remotes]
      .map(([dc, r]) => ({ dc, live: r.live, lastHeard: r.lastHeard + wallMinusMonotonic }))
      .sort((a, b) => (a.dc < b.dc ? -1 : 1));
  }

  /**
   * Something other than a heartbeat came from `dc` (anti-entropy entries): it was live when it sent
   * it, as a heartbeat would say. A heal moves megabytes over the link the heartbeats take too, and a
   * node busy merging them reads its input late: heartbeats waiting behind the entries would let
   * the lease lapse, and the DC would go down and up again mid-heal, every transfer in flight started
   * over. Only a heartbeat brings a DC up (or reports a gap); this keeps a live one live.
   */
  heard(dc: string): void {
    const remote = this.#remotes.get(dc);
    if (remote?.live !== true) return;
    remote.lastHeard = Math.max(remote.lastHeard, this.#o.clock.monotonic());
    remote.leaseFrom = Math.max(remote.leaseFrom, remote.lastHeard);
  }

  /** How long ago a DC was last heard: 0 for this one, Infinity for one never heard. */
  lagMs(dc: string): number {
    if (dc === this.#o.dc) return 0;
    const remote = this.#remotes.get(dc);
    return remote === undefined ? Infinity : Math.max(0, this.#o.clock.monotonic() - remote.lastHeard);
  }

  #tick(): void {
    const { announceAs, bus, dc, leaseMs, clock } = this.#o;
    if (announceAs !== undefined) {
      let beat: DcHeartbeat = {
        type: "dc",
        dc,
        node: announceAs,
        seq: ++this.#seq,
        leaseMs,
      };
      if (this.#o.acksKeys !== undefined) beat = { ...beat, acksKeys: this.#o.acksKeys };
      const purgeBefore = this.#o.purgeBefore?.() ?? 0;
      if (purgeBefore > 0) beat = { ...beat, purgeBefore };
      bus.publish(DCS_SUBJECT, encodeMessage(beat));
    }
    const now = clock.monotonic();
    if (this.#judgeBus(now)) this.#expire(now);
    this.#timer = clock.setTimeout(() => this.#tick(), this.#o.heartbeatMs);
  }

  /** False while this process's bus is silent: no DC could be heard, so none goes down. */
  #judgeBus(now: number): boolean {
    const bus = this.#silence?.judge(now);
    if (bus?.state === "silent") {
      if (bus.began)
        this.#o.logger.warn(
          { silentMs: now - bus.from },
          "nothing comes on the bus; data centers keep their leases",
        );
      return false;
    }
    if (bus?.state === "ended") {
      this.#o.logger.info(
        { silentMs: bus.to - bus.from },
        "the bus carries again; its silence does not count against data centers' leases",
      );
      for (const remote of this.#remotes.values())
        remote.leaseFrom = leaseFromAfterSilence(remote.leaseFrom, bus.from, bus.to);
    }
    return true;
  }

  /** Remote DCs silent for longer than their lease go down. */
  #expire(now: number): void {
    for (const [name, remote] of this.#remotes) {
      if (remote.live && now - remote.leaseFrom > remote.leaseMs) {
        remote.live = false;
        this.#o.logger.warn({ dc: name, silentMs: now - remote.lastHeard }, "data center down");
        this.#emit(name, { kind: "down" });
      }
    }
  }

  #onMessage(data: Uint8Array): void {
    this.#o.silence?.health.delivered();
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (err) {
      this.#o.logger.warn({ err }, "malformed dc message");
      return;
    }
    if (msg.type !== "dc") return;
    if (msg.purgeBefore !== undefined) for (const listener of this.#purgeListeners) listener(msg.purgeBefore);
    if (msg.dc === this.#o.dc) return;
    const now = this.#o.clock.monotonic();
    let remote = this.#remotes.get(msg.dc);
    if (remote === undefined) {
      remote = {
        lastHeard: now,
        leaseFrom: now,
        leaseMs: msg.leaseMs,
        live: true,
        seqs: new Map([[msg.node, { seq: msg.seq, at: now }]]),
        keys: new Map(),
        taken: "unknown",
      };
      this.#sayKeys(remote, msg.node, msg.acksKeys, now);
      this.#remotes.set(msg.dc, remote);
      this.#o.logger.info({ dc: msg.dc }, "data center up");
      this.#emit(msg.dc, { kind: "up" });
      return;
    }
    const lastSeq = remote.seqs.get(msg.node)?.seq;
    // A lower number is a restarted node: a fresh sequence, not a gap.
    const gap = lastSeq !== undefined && msg.seq > lastSeq + 1;
    if (lastSeq === undefined) forgetNodes(remote.seqs, remote.lastHeard - NODE_MEMORY_MS);
    remote.seqs.set(msg.node, { seq: msg.seq, at: now });
    remote.lastHeard = now;
    remote.leaseFrom = Math.max(remote.leaseFrom, now);
    remote.leaseMs = msg.leaseMs;
    this.#sayKeys(remote, msg.node, msg.acksKeys, now);
    if (!remote.live) {
      remote.live = true;
      this.#o.logger.info({ dc: msg.dc }, "data center up again");
      this.#emit(msg.dc, { kind: "up" });
    } else if (gap) {
      this.#o.logger.warn(
        { dc: msg.dc, node: msg.node, missed: msg.seq - lastSeq - 1 },
        "heartbeats from data center lost",
      );
      this.#emit(msg.dc, { kind: "gap" });
    }
  }

  #emit(dc: string, event: DcEvent): void {
    for (const listener of this.#listeners) {
      try {
        listener(dc, event);
      } catch (err) {
        this.#o.logger.error({ err, dc }, "dc listener failed");
      }
    }
  }
}

/** Drops the nodes last heard before `before`: what a new node id coming makes room for. */
function forgetNodes(seqs: Map<string, { readonly at: number }>, before: number): void {
  for (const [node, { at }] of seqs) if (at < before) seqs.delete(node);
}
