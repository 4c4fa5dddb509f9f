import { pageSubject } from "@livecount/bus";
import { PNCounter, type Entries, type Entry } from "@livecount/crdt";
import {
  ACTIVE_COUNTER,
  CONNECTIONS_COUNTER,
  PRESENCE_COUNTERS,
  VIEWERS_COUNTER,
  isSeriesCounter,
  tombstoneOf,
  type HoldCode,
} from "@livecount/protocol";
import { isPresenceCounter, type EntryWrite, type PageRecord } from "@livecount/store";
import { ActorClosedError, type ActorHost, type ActorStatus, type Work } from "./actor_host.js";
import { publishedEntries, purgeFrom, purgeableIn, settledDelete } from "./counter_deletes.js";
import { PagePresence, type Hold } from "./page_presence.js";
import { PageSeries } from "./page_series.js";
import { PageVisitors } from "./page_visitors.js";

export { ActorClosedError, type ActorHost, type ActorStatus, type Work } from "./actor_host.js";

/**
 * The actor of one page on its owner node: one mailbox, handled in order. It holds every data
 * center's PN-counter entries of the page and this data center's presence, and turns presence into
 * this data center's presence entries (viewers, active viewers, connections). Created on demand,
 * loaded from the store before it handles anything, passivated by its node when idle.
 */
export class PageActor {
  readonly page: string;
  readonly partition: number;
  /** The page's bus subject, computed once: every flush of the page publishes on it. */
  readonly subject: string;
  readonly #host: ActorHost;
  readonly #counters = new Map<string, PNCounter>();
  readonly #presence = new PagePresence((viewer) => this.#visited(viewer));
  /** Which arriving viewers count as unique visitors (page_visitors.ts). */
  readonly #visitors: PageVisitors;
  /** Entries changed here and not yet durable: counter -> data centers (made on demand, as the next). */
  #unwritten: Map<string, Set<string>> | undefined;
  /** Time buckets (windows, unique visitors, peaks): written through, never held (page_series.ts). */
  readonly series: PageSeries;
  /** Data centers whose entries changed here and must be published once written. */
  #unpublished: Set<string> | undefined;
  /** Entries taken by a flush whose store round trip has not answered yet. */
  #writing = false;
  /** Publisher changes (increments, resets) queued for the commit chain and not answered yet. */
  #queuedChanges = 0;
  #mailbox: Work[] = [];
  #status: ActorStatus = "loading";
  /** Until then presence may still be arriving from gateways (after an owner change): hold `viewers`. */
  #settleAt: number;
  lastActive: number;

  constructor(host: ActorHost, page: string, partition: number, settleAt: number) {
    this.#host = host;
    this.page = page;
    this.partition = partition;
    this.subject = pageSubject(page, partition);
    this.series = new PageSeries(page, host.dc, host.visitorHash);
    this.#visitors = new PageVisitors(this.series, this.#presence);
    this.#settleAt = settleAt;
    this.lastActive = host.now();
  }

  get status(): ActorStatus {
    return this.#status;
  }

  /** Runs `work` in mailbox order: at once when active, after loading otherwise. */
  run(work: Work): void {
    this.lastActive = this.#host.now();
    if (this.#status === "loading") this.#mailbox.push(work);
    else if (this.#status === "closed") work(new ActorClosedError(this.page));
    else work();
  }

  /** Installs the durable state and handles what queued meanwhile. */
  loaded(record: PageRecord): void {
    // Closed while loading (its partition was lost): it must not come back to life.
    if (this.#status === "closed") return;
    for (const [name, entries] of Object.entries(record))
      if (!isSeriesCounter(name)) this.#counter(name).mergeAll(entries);
    this.#status = "active";
    for (const name of PRESENCE_COUNTERS) {
      if (Object.hasOwn(record[name] ?? {}, this.#host.dc)) continue;
      // No own presence entry: start at the floor (value 0), written once a viewer comes.
      const floor = this.#host.presenceFloor(this.partition);
      if (floor > 0) this.#counter(name).merge(this.#host.dc, { p: floor, n: floor });
    }
    const own = this.#counter(VIEWERS_COUNTER).entry(this.#host.dc);
    // Nothing to hold: a fresh page cannot dip while presence resyncs.
    if (own.p === own.n) this.#settleAt = 0;
    else if (this.#settleAt !== 0) this.#host.wakeAt(this, this.#settleAt);
    // Before queued work: what the store held is where the page stood, announced already.
    this.#host.viewersChanged?.(this);
    const queued = this.#mailbox;
    this.#mailbox = [];
    for (const work of queued) work();
    this.#syncPresence();
  }

  /** Stops the actor (partition lost or handed over, or loading failed); queued work fails. */
  close(cause?: unknown): void {
    this.#status = "closed";
    const queued = this.#mailbox;
    this.#mailbox = [];
    for (const work of queued) work(new ActorClosedError(this.page, { cause }));
  }

  get settled(): boolean {
    return this.#settleAt === 0;
  }

  // --- presence ---------------------------------------------------------------------------------

  /**
   * A batch of one gateway's transitions on this page, in order (viewer key, hold code, ...: protocol
   * presence_pages.ts); the entries move once for all. A dropped viewer gets no grace. Viewers in
   * `unvisited` arrive without counting as unique visitors (PresencePages.unvisited).
   */
  presenceTransitions(
    gateway: string,
    transitions: ReadonlyArray<string | HoldCode>,
    unvisited?: ReadonlySet<string>,
  ): void {
    this.#visitors.applying(unvisited, () =>
      this.#presence.transitions(gateway, transitions, this.#host.monotonic(), this.#host.graceMs),
    );
    this.#syncPresence();
  }

  /**
   * Everything `gateway` holds on this page, by viewer (a resync; nothing: it holds nobody). Viewers
   * in `unvisited` arrive without counting as unique visitors, as in `presenceTransitions`.
   */
  replaceGateway(gateway: string, held: ReadonlyMap<string, Hold>, unvisited?: ReadonlySet<string>): void {
    this.#visitors.applying(unvisited, () =>
      this.#presence.replace(gateway, held, this.#host.monotonic(), this.#host.graceMs),
    );
    this.#syncPresence();
  }

  dropGateway(gateway: string): void {
    this.#presence.dropGateway(gateway);
    this.#syncPresence();
  }

  /** Ends lingering viewers whose grace is over, and the settle window once it is over (`now`: monotonic). */
  tick(now: number): void {
    this.#presence.expire(now);
    this.#syncPresence();
  }

  get viewers(): number {
    return this.#presence.count;
  }

  /** The page's viewers as this DC shows them (over live DCs) now: the peaks may rise. */
  notePeak(viewers: number): void {
    if (this.series.viewers(viewers, this.#host.now())) this.#host.markDirty(this);
    this.#visited(undefined);
  }

  /** A viewer arrived (or none: the day may have turned): its register of the day may rise. */
  #visited(arrived: string | undefined): void {
    if (this.#visitors.visited(arrived, this.#status === "active", this.#host.now()))
      this.#host.markDirty(this);
  }

  // --- durable counters -------------------------------------------------------------------------

  /** This data center's entry of a counter. */
  ownEntry(counter: string): Entry {
    // Read without creating the counter: a reset of one that never existed leaves no trace.
    return this.#counters.get(counter)?.entry(this.#host.dc) ?? { p: 0, n: 0 };
  }

  /** Every data center's entry of a counter. */
  entries(counter: string): Entries {
    return this.#counters.get(counter)?.entries() ?? {};
  }

  /** A presence counter over the DCs `isLive` accepts, as `livePresenceOf`, with no copy of the entries. */
  livePresence(counter: string, isLive: (dc: string) => boolean): number {
    return Math.max(0, this.#counters.get(counter)?.value(isLive) ?? 0);
  }

  /** Whether the page holds the counter (deleted ones too, until purged). */
  holds(counter: string): boolean {
    return this.#counters.has(counter);
  }

  /** Public counters held (likes, reactions; a deleted one until purged): `@` names are internal. */
  get counterCount(): number {
    let n = 0;
    for (const name of this.#counters.keys()) if (!name.startsWith("@")) n++;
    return n;
  }

  /** A counter's value over every data center. */
  value(counter: string): number {
    return this.#counters.get(counter)?.value() ?? 0;
  }

  /**
   * Where this DC's entry of `counter` starts in the store (`IncrementOp.startAt`): the purge floor
   * while the actor holds no own entry of it, since the store then holds none either.
   */
  startAt(counter: string): number {
    return Object.hasOwn(this.entries(counter), this.#host.dc) ? 0 : this.#host.purgeFloor(this.partition);
  }

  /**
   * Where a retried change may publish this DC's entries of the counter again: everywhere, if it has
   * one and it is no settled delete; for this DC's gateways only ("local") if it is one: another DC
   * may have purged it, where the copy would come back (the entry alone even shown at 0; see
   * `entriesOf`); nowhere if it has none.
   */
  republishTo(counter: string): "all" | "local" | "none" {
    if (!Object.hasOwn(this.entries(counter), this.#host.dc)) return "none";
    return settledDelete(this.#counters, counter, this.#host.dc) ? "local" : "all";
  }

  /**
   * Purged counters (each with its tombstone) left the store: they leave memory too, this DC's
   * entries at least (the store starts them again at the purge floor). When memory no longer holds a
   * purgeable copy, another DC's entries arrived since the store looked (a like, or a new delete,
   * after the delete): they are news, stay, and are written again.
   */
  purged(counters: readonly string[]): void {
    for (const counter of counters) {
      for (const name of [counter, tombstoneOf(counter)]) this.#unwritten?.delete(name);
      const news = purgeFrom(this.#counters, counter, this.#host.dc);
      for (const { name, dc } of news) this.#markUnwritten(name, dc);
      if (news.length > 0) this.#host.markDirty(this);
    }
  }

  /**
   * Whether memory holds a purgeable copy of a deleted counter (Store.purgeTombstones's rule) with
   * nothing of it, or of its tombstone, waiting for a flush (the store lacks that yet).
   */
  purgeableAsStored(counter: string): boolean {
    const u = this.#unwritten;
    return !u?.has(counter) && !u?.has(tombstoneOf(counter)) && purgeableIn(this.#counters, counter);
  }

  /** The store reconnected (it may have lost its last writes): this DC's entries go to it again. */
  rewriteOwn(): void {
    const dc = this.#host.dc;
    for (const [name, c] of this.#counters)
      if (c.entry(dc).p > 0 || c.entry(dc).n > 0) this.#markUnwritten(name, dc);
    if (this.#unwritten !== undefined) this.#host.markDirty(this, true);
  }

  /** Installs this data center's entry as the store returned it after a durable increment. */
  applied(counter: string, entry: Entry): void {
    // A change of 0 to a counter nobody wrote (a reset or delete of one that never existed) stored
    // nothing: it leaves no counter behind either.
    if (entry.p === 0 && entry.n === 0 && !this.#counters.has(counter)) return;
    // Durable already, and the caller publishes it before answering: no flush needed for it.
    this.#counter(counter).merge(this.#host.dc, entry);
  }

  // --- replication and snapshots ------------------------------------------------------------------

  /** Every data center's entries of every counter. */
  snapshot(): Record<string, Entries> {
    // fromEntries defines own properties, so a counter named "__proto__" stays a counter.
    return Object.fromEntries([...this.#counters].map(([name, counter]) => [name, counter.entries()]));
  }

  /** One data center's entries to publish (this DC's of every counter): `publishedEntries`. */
  entriesOf(dc: string): Map<string, Entry> {
    return publishedEntries(this.#counters, dc, dc === this.#host.dc);
  }

  /**
   * Merges another data center's entries, received on the page's subject. They are persisted here
   * too (so a read in this DC shows the global value after a restart) but never published again:
   * every watcher got them from the same subject.
   */
  mergeRemote(dc: string, counters: Readonly<Record<string, Entry>>): void {
    if (dc === this.#host.dc) return;
    let changed = false;
    for (const [name, entry] of Object.entries(counters)) {
      if (isSeriesCounter(name)) {
        this.series.remote(name, dc, entry);
        changed = true;
      } else if (this.#counter(name).merge(dc, entry)) {
        this.#markUnwritten(name, dc);
        changed = true;
      }
    }
    if (!changed) return;
    this.#host.markDirty(this);
    this.#host.viewersChanged?.(this);
  }

  /**
   * Installs entries of any DC, this one's included, that this DC's store holds already (anti-entropy
   * writes them there first and publishes what advanced). A DC rebuilt from an empty store gets its
   * own entries back this way. `unconfirmed`: the store's merge failed without saying whether it
   * applied (a timeout): what advanced is written and published by the next flush.
   */
  mergeDurable(record: PageRecord, store: "stored" | "unconfirmed" = "stored"): void {
    // Presence that advanced, in any DC and in this one: what viewers and presence depend on. A heal
    // moves likes on most pages and presence on few; the rest needs neither recomputed.
    let presenceAdvanced = false;
    let ownPresenceAdvanced = false;
    for (const [name, entries] of Object.entries(record)) {
      if (isSeriesCounter(name)) continue;
      const presence = isPresenceCounter(name);
      for (const [dc, entry] of Object.entries(entries)) {
        if (!this.#counter(name).merge(dc, entry)) continue;
        presenceAdvanced ||= presence;
        ownPresenceAdvanced ||= presence && dc === this.#host.dc;
        if (store === "unconfirmed") this.#markWrite(name, dc);
      }
    }
    if (ownPresenceAdvanced) this.#ownRaised();
    if (presenceAdvanced) this.#host.viewersChanged?.(this);
  }

  /** This DC's presence entries moved up under the actor: presence keeps counting on top of them. */
  #ownRaised(): void {
    for (const name of PRESENCE_COUNTERS) this.#host.presenceRaised(this.partition, this.ownEntry(name).p);
    this.#syncPresence();
  }

  /**
   * Entries that must be persisted before the next publish, with at most `registers` of the
   * unique-visitor registers waiting (the others stay for a later flush); clears what it takes. The
   * actor counts as busy until `written()` or `restoreUnwritten()` says how the write ended.
   */
  takeUnwritten(registers = Infinity): EntryWrite[] {
    const writes: EntryWrite[] = [];
    for (const [counter, dcs] of this.#unwritten ?? []) {
      const c = this.#counter(counter);
      for (const dc of dcs) {
        // This DC's presence is indexed, so a later owner finds pages where it was left non-zero.
        const indexed = dc === this.#host.dc && isPresenceCounter(counter);
        writes.push({ page: this.page, counter, dc, entry: c.entry(dc), indexed });
      }
    }
    this.#unwritten = undefined;
    this.series.take(writes, registers);
    this.#writing = true;
    return writes;
  }

  /** Unique-visitor registers among `unwrittenCount`: what a flush at its bound leaves for later. */
  get registersWaiting(): number {
    return this.series.registersWaiting;
  }

  /** How many entries `takeUnwritten` would return now: what a flush bounds. */
  get unwrittenCount(): number {
    let n = this.series.pendingCount;
    for (const dcs of this.#unwritten?.values() ?? []) n += dcs.size;
    return n;
  }

  /** The write of the entries last taken is durable (or was refused for a stale fence). */
  written(): void {
    this.#writing = false;
  }

  /** A flush failed: the entries must be written again, and published after that. */
  restoreUnwritten(writes: readonly EntryWrite[], unpublished: Iterable<string>): void {
    this.#writing = false;
    this.series.restore(writes);
    for (const w of writes) if (!isSeriesCounter(w.counter)) this.#markUnwritten(w.counter, w.dc);
    for (const dc of unpublished) (this.#unpublished ??= new Set()).add(dc);
  }

  #markUnwritten(counter: string, dc: string): void {
    const unwritten = (this.#unwritten ??= new Map());
    unwritten.set(counter, (unwritten.get(counter) ?? new Set()).add(dc));
  }

  /** Each data center whose entries must be published after the write taken with them, with its entries now. */
  takeUnpublished(): Map<string, Map<string, Entry>> {
    const updates = new Map<string, Map<string, Entry>>();
    for (const dc of this.#unpublished ?? []) updates.set(dc, this.entriesOf(dc));
    this.#unpublished = undefined;
    this.series.publishInto(updates);
    return updates;
  }

  /** A publisher change of this page waits for the commit chain (+1) or was answered (-1): the actor stays meanwhile. */
  changesQueued(delta: 1 | -1): void {
    this.#queuedChanges += delta;
  }

  get hasPendingWork(): boolean {
    return (
      this.unwrittenCount > 0 ||
      this.#unpublished !== undefined ||
      this.#writing ||
      this.#queuedChanges > 0 ||
      this.#mailbox.length > 0
    );
  }

  /** Nothing would be lost by dropping this actor from memory. */
  get isIdle(): boolean {
    return this.#status === "active" && this.#presence.isEmpty && !this.hasPendingWork;
  }

  #counter(name: string): PNCounter {
    let c = this.#counters.get(name);
    if (c === undefined) this.#counters.set(name, (c = new PNCounter()));
    return c;
  }

  /** The entry is to be written, then published, by the next flush. */
  #markWrite(name: string, dc: string): void {
    this.#markUnwritten(name, dc);
    (this.#unpublished ??= new Set()).add(dc);
    this.#host.markDirty(this);
  }

  /**
   * Moves this data center's presence entries (viewers, active viewers, connections) to what
   * presence holds: p grows on arrivals, n on departures.
   */
  #syncPresence(): void {
    if (this.#status !== "active") return;
    if (this.#settleAt !== 0) {
      if (this.#host.monotonic() < this.#settleAt) return;
      this.#settleAt = 0;
    }
    this.#moveEntry(VIEWERS_COUNTER, this.#presence.count);
    this.#moveEntry(ACTIVE_COUNTER, this.#presence.active);
    this.#moveEntry(CONNECTIONS_COUNTER, this.#presence.connections);
    this.#visitors.presenceChanged();
    const next = this.#presence.nextDeadline();
    if (next !== undefined) this.#host.wakeAt(this, next);
    this.#host.viewersChanged?.(this);
  }

  #moveEntry(name: string, value: number): void {
    const own = this.ownEntry(name);
    const delta = value - (own.p - own.n);
    if (delta === 0) return;
    const entry = this.#counter(name).add(this.#host.dc, delta);
    this.#markWrite(name, this.#host.dc);
    this.#host.presenceRaised(this.partition, entry.p);
  }
}
