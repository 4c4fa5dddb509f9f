import { dcUpdatesSubject, type Bus, type BusHandler, type Subscription } from "@livecount/bus";
import type { DcLiveness } from "@livecount/cluster";
import { MAX_SNAPSHOT_BATCH, ProtocolError, decodeMessage, type CountFrame } from "@livecount/protocol";
import { partitionOf, type HashRing } from "@livecount/ring";
import { Backoff, Coalescer, LogThrottle, type Clock, type Logger } from "@livecount/runtime";
import type { OwnerClient } from "./owner_client.js";
import { PageView, sameValue } from "./page_view.js";

/** Where count frames go: the gateway publishes them to the pages' sockets. */
export interface FrameSink {
  /** One window's changed values, all computed at `ts` (a socket's pages among them travel together). */
  publish(ts: number, frames: readonly CountFrame[]): void;
}

export interface PageViewsOptions {
  /** This gateway's data center: its nodes publish what they learn by anti-entropy to it alone. */
  readonly dc: string;
  readonly bus: Bus;
  readonly owners: OwnerClient;
  readonly sink: FrameSink;
  /** Which data centers are live: their viewers count. */
  readonly liveness: DcLiveness;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly partitions: number;
  /** At most one count frame per page per window. */
  readonly coalesceMs: number;
  /**
   * Frames a second this gateway sends for one page, over all its watchers: a page watched by more
   * than `pageFrameRate * coalesceMs / 1000` sockets here gets its frames spaced further apart
   * (`frameSpacingMs`).
   */
  readonly pageFrameRate: number;
  /** A changed page's frame waited past the window for its spacing (once per flush it waited in). */
  readonly onSpaced?: (pages: number) => void;
  /** Cap of the first retry's delay for a failed snapshot (full jitter); doubles up to `maxRetryMs`. */
  readonly retryMs: number;
  readonly maxRetryMs: number;
  /** A node began serving the partition (PageUpdates.taken), after its watched pages' re-take was asked. */
  readonly onServing?: (partition: number) => void;
}

/**
 * The pages this gateway has watchers for. The first watcher subscribes to the page's subject and
 * takes a snapshot from the owner; updates merge on top (idempotent and commutative, so the order of
 * snapshot and updates does not matter); the last watcher unsubscribes. Changed values go out as
 * one coalesced frame per page per window.
 *
 * Pages first watched in one turn of the event loop start together at its end: their subscriptions
 * and one `snapshots` request per partition leave in one write to the bus. After a restart every
 * page is new at once, and a request and a write per page would add up to thousands of each.
 */
export class PageViews {
  readonly #opts: PageViewsOptions;
  /** Lines that can repeat per request or message, throttled (LogThrottle). */
  readonly #logs = new LogThrottle();
  readonly #views = new Map<string, PageView>();
  readonly #dirty = new Set<string>();
  readonly #coalescer: Coalescer;
  /** Per partition with watched pages: how many, and the subscription to this DC's updates of it. */
  readonly #partitions = new Map<number, { pages: number; subscription: Subscription }>();
  /** Views made in this turn, started together at its end (#startViews). */
  #starting: PageView[] = [];
  /** One handler for every page's subject: a closure per watched page would cost each about 120 bytes. */
  readonly #onPageUpdate: BusHandler = (data, subject) => this.#onUpdate(data, subject);

  constructor(opts: PageViewsOptions) {
    this.#opts = opts;
    this.#coalescer = new Coalescer(opts.clock, opts.coalesceMs, () => this.#flush());
  }

  get size(): number {
    return this.#views.size;
  }

  /** Whether some socket here watches `page`. */
  has(page: string): boolean {
    return this.#views.has(page);
  }

  /**
   * Adds a watcher. Returns the page id as held here, one string per watched page for every socket
   * to share, and the current frame when the page's value is already known.
   */
  watch(page: string): { readonly id: string; readonly frame: CountFrame | undefined } {
    let view = this.#views.get(page);
    if (view === undefined) {
      const partition = partitionOf(page, this.#opts.partitions);
      view = new PageView(page, partition);
      this.#views.set(page, view);
      if (this.#starting.push(view) === 1) this.#opts.clock.defer(() => this.#startViews());
    }
    view.watchers++;
    const frame = view.loaded
      ? (view.sent ?? view.frame(view.page, this.#opts.clock.now(), this.#opts.liveness))
      : undefined;
    return { id: view.page, frame };
  }

  unwatch(page: string): void {
    const view = this.#views.get(page);
    if (view === undefined || --view.watchers > 0) return;
    if (view.retryTimer !== undefined) this.#opts.clock.clearTimeout(view.retryTimer);
    this.#views.delete(page);
    this.#dirty.delete(page);
    // A view left in the turn it was made never subscribed (#startViews skips it).
    if (view.subscription === undefined) return;
    view.subscription.unsubscribe();
    this.#unwatchPartition(view.partition);
  }

  /** Subscribes the views made this turn and still watched, then loads their snapshots in batches. */
  #startViews(): void {
    const views = this.#starting.filter((view) => this.#views.get(view.page) === view);
    this.#starting = [];
    const started: PageView[] = [];
    for (const view of views) {
      try {
        view.subscription = this.#opts.bus.subscribe(view.subject, this.#onPageUpdate);
        this.#watchPartition(view.partition);
      } catch (err) {
        // The bus closed under the turn (the process is stopping): the page stays unwatched.
        view.subscription?.unsubscribe();
        view.subscription = undefined;
        this.#logs.log(this.#opts.logger, "warn", { err, page: view.page }, "page not subscribed");
        continue;
      }
      started.push(view);
    }
    this.#loadSnapshots(started);
  }

  /**
   * Snapshots of `views`: one request per partition and MAX_SNAPSHOT_BATCH pages, a lone page as
   * `snapshot`. Per partition, not per owner: an owner answers a batch once its slowest page is
   * read, and a page of a partition it is still taking over waits for the lease; only its own
   * partition's pages wait with it.
   */
  #loadSnapshots(views: readonly PageView[]): void {
    const byPartition = new Map<number, PageView[]>();
    for (const view of views) {
      const batch = byPartition.get(view.partition);
      if (batch === undefined) byPartition.set(view.partition, [view]);
      else batch.push(view);
    }
    for (const batch of byPartition.values()) {
      let owner: string;
      try {
        owner = this.#opts.owners.ownerOfPage(batch[0]!.page);
      } catch {
        // No live owner: the single path fails and retries each page with backoff.
        for (const view of batch) void this.#loadSnapshot(view.page, view);
        continue;
      }
      for (let i = 0; i < batch.length; i += MAX_SNAPSHOT_BATCH) {
        const chunk = batch.slice(i, i + MAX_SNAPSHOT_BATCH);
        if (chunk.length === 1) void this.#loadSnapshot(chunk[0]!.page, chunk[0]!);
        else void this.#loadBatch(owner, chunk);
      }
    }
  }

  /** One owner's answer for several pages: each page's reply counts as its own snapshot's would. */
  async #loadBatch(owner: string, views: readonly PageView[]): Promise<void> {
    let replies;
    try {
      replies = (
        await this.#opts.owners.toNode(owner, { type: "snapshots", pages: views.map((v) => v.page) })
      ).replies;
    } catch (err) {
      // An owner of an earlier release does not know the batch (bad_frame): each page goes on its own.
      const alone = err instanceof ProtocolError && err.code === "bad_frame";
      for (const view of views) {
        if (alone) void this.#loadSnapshot(view.page, view);
        else this.#snapshotFailed(view, err);
      }
      return;
    }
    views.forEach((view, i) => {
      const reply = replies[i];
      if (reply?.type === "page_state" && reply.page === view.page)
        this.#snapshotLoaded(view, reply.counters);
      // Past what one reply carries: asked for on its own, at once.
      else if (reply?.type === "error" && reply.code === "payload_too_large")
        void this.#loadSnapshot(view.page, view);
      else
        this.#snapshotFailed(
          view,
          reply?.type === "error"
            ? new ProtocolError(reply.code, reply.message)
            : new ProtocolError(
                "internal",
                `the owner answered ${view.page} with ${reply?.type ?? "nothing"}`,
              ),
        );
    });
  }

  /** A page of `partition` is watched: this DC's anti-entropy updates of the partition are wanted. */
  #watchPartition(partition: number): void {
    const held = this.#partitions.get(partition);
    if (held !== undefined) {
      held.pages++;
      return;
    }
    const subscription = this.#opts.bus.subscribe(dcUpdatesSubject(this.#opts.dc, partition), (data) =>
      this.#onUpdates(partition, data),
    );
    this.#partitions.set(partition, { pages: 1, subscription });
  }

  #unwatchPartition(partition: number): void {
    const held = this.#partitions.get(partition);
    if (held === undefined || --held.pages > 0) return;
    held.subscription.unsubscribe();
    this.#partitions.delete(partition);
  }

  /** A data center went down or came back: every value with its entries may change. */
  liveDcsChanged(): void {
    for (const [page, view] of this.#views) if (view.loaded) this.#dirty.add(page);
    this.#coalescer.request();
  }

  /** Takes fresh snapshots of every watched page (after a bus reconnect: updates may have been missed). */
  resnapshotAll(): void {
    this.#resnapshot(() => true);
  }

  /** Takes fresh snapshots of the watched pages that `owners` own in `ring` (restarted counter nodes). */
  resnapshotOwnedBy(ring: HashRing, owners: ReadonlySet<string>): void {
    this.#resnapshot((view) => {
      const owner = ring.ownerOf(view.partition);
      return owner !== undefined && owners.has(owner);
    });
  }

  /**
   * Loads fresh snapshots of the views `include` picks. Views whose snapshot failed wait out their
   * backoff, unless `waiting` (their owner just said it serves): then they go now.
   */
  #resnapshot(include: (view: PageView) => boolean, waiting = false): void {
    const views: PageView[] = [];
    for (const view of this.#views.values()) {
      // Views not started yet load their first snapshot at the end of the turn.
      if (view.subscription === undefined || !include(view)) continue;
      if (view.retryTimer !== undefined) {
        if (!waiting) continue;
        this.#opts.clock.clearTimeout(view.retryTimer);
        view.retryTimer = undefined;
        view.backoff = undefined;
      }
      views.push(view);
    }
    this.#loadSnapshots(views);
  }

  close(): void {
    this.#coalescer.close();
    for (const view of this.#views.values()) {
      view.subscription?.unsubscribe();
      if (view.retryTimer !== undefined) this.#opts.clock.clearTimeout(view.retryTimer);
    }
    this.#views.clear();
    for (const { subscription } of this.#partitions.values()) subscription.unsubscribe();
    this.#partitions.clear();
  }

  /** Many pages' entries this DC's counter nodes learnt by anti-entropy: those watched here merge. */
  #onUpdates(partition: number, data: Uint8Array): void {
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (err) {
      this.#logs.log(this.#opts.logger, "warn", { err, partition }, "malformed page updates");
      return;
    }
    if (msg.type !== "updates" || msg.partition !== partition) return;
    // A node began serving the partition: what its earlier owner published last may not have come.
    if (msg.taken !== undefined) {
      this.#resnapshot((view) => view.partition === partition, true);
      this.#opts.onServing?.(partition);
    }
    for (const [page, counters] of Object.entries(msg.pages)) {
      const view = this.#views.get(page);
      if (view !== undefined && view.merge(counters) && view.loaded) this.#markDirty(page);
    }
  }

  /** One data center's entries of a page, on the page's subject (an update naming another page is dropped). */
  #onUpdate(data: Uint8Array, subject: string): void {
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (err) {
      this.#logs.log(this.#opts.logger, "warn", { err, subject }, "malformed page update");
      return;
    }
    if (msg.type !== "update") return;
    const view = this.#views.get(msg.page);
    if (view === undefined || view.subject !== subject) return;
    if (view.mergeFrom(msg.dc, msg.counters) && view.loaded) this.#markDirty(msg.page);
  }

  async #loadSnapshot(page: string, view: PageView): Promise<void> {
    // A retry is due already, or the page was left (or watched anew) meanwhile.
    if (view.retryTimer !== undefined || this.#views.get(page) !== view) return;
    try {
      const reply = await this.#opts.owners.forPage(page, { type: "snapshot", page });
      this.#snapshotLoaded(view, reply.counters);
    } catch (err) {
      this.#snapshotFailed(view, err);
    }
  }

  #snapshotLoaded(view: PageView, counters: Parameters<PageView["merge"]>[0]): void {
    if (this.#views.get(view.page) !== view) return;
    view.merge(counters);
    view.backoff = undefined;
    if (!view.loaded) {
      view.loaded = true;
      // Everyone watching so far is waiting for a first frame, even if the value is all zeros.
      view.sent = undefined;
    }
    this.#markDirty(view.page);
  }

  /** Tries the page's snapshot again after a backoff delay, unless it is unwatched by then. */
  #snapshotFailed(view: PageView, err: unknown): void {
    const { page } = view;
    if (this.#views.get(page) !== view || view.retryTimer !== undefined) return;
    const delay = (view.backoff ??= new Backoff(this.#opts.retryMs, this.#opts.maxRetryMs)).next();
    this.#logs.log(this.#opts.logger, "warn", { err, page, retryInMs: delay }, "snapshot failed; retrying");
    view.retryTimer = this.#opts.clock.setTimeout(() => {
      view.retryTimer = undefined;
      if (this.#views.get(page) === view) void this.#loadSnapshot(page, view);
    }, delay);
  }

  #markDirty(page: string): void {
    this.#dirty.add(page);
    this.#coalescer.request();
  }

  /**
   * Publishes every dirty page's new value at once: one timer tick, aligned for all sockets. A page
   * whose last frame went out less than its spacing ago stays dirty for a later flush.
   */
  #flush(): void {
    const ts = this.#opts.clock.now();
    const frames: CountFrame[] = [];
    let spaced = 0;
    for (const page of this.#dirty) {
      const view = this.#views.get(page);
      if (view !== undefined && view.loaded && view.sent !== undefined) {
        const { pageFrameRate, coalesceMs } = this.#opts;
        const spacing = frameSpacingMs(view.watchers, pageFrameRate, coalesceMs);
        // Within the window the coalescer spaces the flushes already (a timer may fire a ms early).
        if (spacing > coalesceMs && ts - view.sent.ts < spacing) {
          spaced++;
          continue;
        }
      }
      this.#dirty.delete(page);
      if (view === undefined || !view.loaded) continue;
      const frame = view.frame(page, ts, this.#opts.liveness);
      if (sameValue(view.sent, frame)) continue;
      view.sent = frame;
      frames.push(frame);
    }
    if (frames.length > 0) this.#opts.sink.publish(ts, frames);
    if (spaced > 0) {
      this.#opts.onSpaced?.(spaced);
      this.#coalescer.request();
    }
  }
}

/** However many watch a page, it gets a frame at least this often while it changes. */
export const MAX_FRAME_SPACING_MS = 1000;

/**
 * The least time between two frames of a page that `watchers` sockets here watch: the coalescing
 * window, or as long as `pageFrameRate` frames a second take to reach them all, up to
 * MAX_FRAME_SPACING_MS.
 */
export function frameSpacingMs(watchers: number, pageFrameRate: number, coalesceMs: number): number {
  return Math.max(coalesceMs, Math.min(MAX_FRAME_SPACING_MS, (watchers * 1000) / pageFrameRate));
}
