import {
  DCS_SUBJECT,
  gatewaysSubject,
  nodeSubject,
  pageFromSubject,
  pageSubject,
  partitionPagesSubject,
  type Bus,
  type Subscription,
} from "@livecount/bus";
import { DcLiveness, Membership, type DcEvent } from "@livecount/cluster";
import {
  ProtocolError,
  VIEWERS_COUNTER,
  decodeMessage,
  decodeNodeReply,
  decodeNodeRequest,
  encodeMessage,
  isCounterName,
  isPageId,
  type ErrorCode,
  type IncrementRequest,
  type NodeReply,
  type NodeRequest,
  type PresenceBatch,
  type PresenceSync,
  type ResetRequest,
} from "@livecount/protocol";
import type { Entry } from "@livecount/crdt";
import { partitionOf } from "@livecount/ring";
import { Coalescer, systemClock, type Clock, type Logger, type TimerHandle } from "@livecount/runtime";
import type { FencedWrites, IncrementOp, Store } from "@livecount/store";
import type { Registry } from "prom-client";
import type { CounterConfig } from "./counter_config.js";
import { CounterMetrics } from "./counter_metrics.js";
import { PageActor, type ActorHost } from "./page_actor.js";
import { PartitionOwnership, type LossReason } from "./partition_ownership.js";
import { ObservedResets, listPages } from "./publisher_ops.js";

export interface CounterNodeOptions {
  readonly config: CounterConfig;
  readonly bus: Bus;
  readonly store: Store;
  readonly logger: Logger;
  readonly registry: Registry;
  readonly clock?: Clock;
}

interface GatewayLease {
  lastSeen: number;
  leaseMs: number;
  /** Pages on this node where the gateway contributed presence. */
  readonly pages: Set<string>;
}

interface PendingIncrement {
  readonly actor: PageActor;
  readonly request: IncrementRequest;
  readonly resolve: (reply: NodeReply) => void;
}

/** How long a request waits for its partition's lease (a takeover waits out the old owner's lease). */
const OWNERSHIP_WAIT_FACTOR = 1.5;
/** Idle actors are looked for every this many sweeps. */
const PASSIVATION_SWEEPS = 20;
/** How far back to ask a data center heard for the first time for its changes (its own clock). */
const FIRST_CONTACT_WINDOW_MS = 10 * 60_000;
/** How long the change log remembers pages: resyncs reach back at most this far. */
const CHANGE_LOG_RETENTION_MS = 60 * 60_000;
/** Resync requests from the same DC within this window are served once. */
const RESYNC_DEBOUNCE_MS = 500;
/**
 * Resyncs reach this much further back than the last moment the link was known to work: updates
 * still in flight when it broke were lost too, and one node's heartbeat may overtake another's updates.
 */
const RESYNC_MARGIN_MS = 1000;
/** Pages published per turn of the event loop while resyncing, so a resync never stalls the node. */
const RESYNC_CHUNK = 500;
/** A request is forwarded at most once: owners that disagree about the ring answer "unavailable". */
const MAX_HOPS = 1;

function errorReply(code: ErrorCode, message?: string): NodeReply {
  const e = new ProtocolError(code, message);
  return { type: "error", code: e.code, message: e.message };
}

/**
 * A counter node: owns the partitions the ring gives it (each under a fenced lease), runs an actor
 * per page of those partitions, forwards what it does not own, persists this data center's entries
 * in batches and publishes them only once durable.
 */
export class CounterNode implements ActorHost {
  readonly dc: string;
  readonly graceMs: number;
  readonly #config: CounterConfig;
  readonly #bus: Bus;
  readonly #store: Store;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #metrics: CounterMetrics;
  readonly #membership: Membership;
  readonly #liveness: DcLiveness;
  /** Per held partition, the subscription that brings other DCs' entries of its pages. */
  readonly #partitionSubs = new Map<number, Subscription>();
  /** page -> when this DC's entries of it were last published: what a resync publishes again. */
  readonly #changedAt = new Map<string, number>();
  /** requesting DC -> when its last resync request was served and from when. */
  readonly #resyncServed = new Map<string, { at: number; since: number }>();
  /** remote DC -> when this node last published its changes again unasked for it, and from when. */
  readonly #resyncPushed = new Map<string, { at: number; since: number }>();
  /** Partitions taken since other DCs were last asked for their entries of them. */
  #acquiredUnsynced = new Set<number>();
  #acquiredTimer: TimerHandle | undefined;
  #antiEntropyTimer: TimerHandle | undefined;
  readonly #ownership: PartitionOwnership;
  readonly #flusher: Coalescer;
  readonly #actors = new Map<string, PageActor>();
  readonly #dirty = new Set<PageActor>();
  readonly #wake = new Map<PageActor, number>();
  readonly #unsettled = new Set<PageActor>();
  readonly #gateways = new Map<string, GatewayLease>();
  /** Per partition, when presence counts again after this node took the partition over. */
  readonly #settleAt = new Map<number, number>();
  #increments: PendingIncrement[] = [];
  #incrementsScheduled = false;
  #incrementsInFlight: Promise<void> = Promise.resolve();
  /** Resets and deletes: committed on the chain of increments, between their batches. */
  readonly #resets: ObservedResets;
  readonly #subs: Subscription[] = [];
  #sweepTimer: TimerHandle | undefined;
  #sweeps = 0;
  /** A new incarnation is about to be announced (once for every partition lost in the same turn). */
  #renewingIncarnation = false;
  /** When the last sweep ran: a sweep much later than planned means this process did not run. */
  #lastSweepAt = 0;
  #status: "new" | "running" | "stopping" | "stopped" = "new";

  constructor(opts: CounterNodeOptions) {
    this.#config = opts.config;
    this.dc = opts.config.dc;
    this.graceMs = opts.config.graceMs;
    this.#bus = opts.bus;
    this.#store = opts.store;
    this.#clock = opts.clock ?? systemClock;
    this.#log = opts.logger.child({ component: "counter", node: opts.config.nodeId, dc: opts.config.dc });
    this.#metrics = new CounterMetrics(opts.registry, { partitionsOwned: () => this.#ownership.heldCount });
    this.#membership = new Membership({
      bus: opts.bus,
      clock: this.#clock,
      logger: this.#log,
      dc: opts.config.dc,
      partitions: opts.config.partitions,
      vnodes: opts.config.vnodes,
      leaseMs: opts.config.nodeLeaseMs,
      self: opts.config.nodeId,
    });
    this.#ownership = new PartitionOwnership({
      store: opts.store,
      clock: this.#clock,
      logger: this.#log,
      // The lease holder is this process (its incarnation at start), not the node id: a restarted
      // process must wait out its predecessor's leases rather than inherit their epochs.
      node: `${opts.config.nodeId}/${this.#membership.incarnation}`,
      leaseMs: opts.config.partitionLeaseMs,
      retryMs: Math.max(100, Math.floor(opts.config.partitionLeaseMs / 10)),
    });
    this.#ownership.onLoss((partition, reason) => this.#onPartitionLoss(partition, reason));
    this.#ownership.onAcquire((partition) => this.#onPartitionAcquired(partition));
    this.#liveness = new DcLiveness({
      bus: opts.bus,
      clock: this.#clock,
      logger: this.#log,
      dc: opts.config.dc,
      leaseMs: opts.config.dcLeaseMs,
      heartbeatMs: opts.config.dcHeartbeatMs,
      announceAs: opts.config.nodeId,
      firstContactWindowMs: FIRST_CONTACT_WINDOW_MS,
    });
    this.#flusher = new Coalescer(
      this.#clock,
      opts.config.coalesceMs,
      () => this.#flush(),
      (err) => this.#log.error({ err }, "flush failed"),
    );
    this.#resets = new ObservedResets({
      dc: this.dc,
      store: this.#store,
      logger: this.#log,
      idempotencyTtlMs: opts.config.idempotencyTtlMs,
      now: () => this.#clock.now(),
      fenceOf: (partition) => this.#ownership.fenceOf(partition),
      lost: (partition) => void this.#onPartitionLoss(partition, "lost"),
      counted: (kind, outcome) => this.#metrics.resets.inc({ kind, outcome }),
      publish: (actor, counters) => {
        const ts = this.#clock.now();
        // fromEntries defines own properties: a counter named "__proto__" stays a counter.
        this.#publishOwn(actor.page, actor.partition, Object.fromEntries(counters), ts);
        this.#changedAt.set(actor.page, ts);
      },
    });
  }

  get nodeId(): string {
    return this.#config.nodeId;
  }

  /** Ready once it owns every partition the ring gives it. */
  get ready(): boolean {
    if (this.#status !== "running") return false;
    const wanted = this.#membership.ring.partitionsOf(this.#config.nodeId);
    return wanted.every((p) => this.#ownership.fenceOf(p) !== undefined);
  }

  async start(): Promise<void> {
    if (this.#status !== "new") throw new Error("counter node already started");
    this.#status = "running";
    const { dc, nodeId } = this.#config;
    this.#subs.push(this.#bus.serve(nodeSubject(dc, nodeId), (data) => this.#serve(data)));
    this.#subs.push(this.#bus.subscribe(gatewaysSubject(dc), (data) => this.#onGatewayHeartbeat(data)));
    this.#subs.push(this.#bus.subscribe(DCS_SUBJECT, (data) => this.#onDcMessage(data)));
    this.#liveness.onChange((remote, event) => this.#onDcEvent(remote, event));
    this.#liveness.start();
    this.#membership.onChange((ring) => void this.#setWanted(ring.partitionsOf(nodeId)));
    this.#membership.start();
    this.#ownership.start();
    await this.#setWanted(this.#membership.ring.partitionsOf(nodeId));
    this.#scheduleSweep();
    this.#scheduleAntiEntropy();
    this.#log.info({ partitions: this.#ownership.heldCount }, "counter node started");
  }

  /** Hands partitions over: leaves the ring, flushes every page, releases every lease. */
  async stop(): Promise<void> {
    if (this.#status !== "running") return;
    this.#status = "stopping";
    this.#membership.leave();
    await this.#drainIncrements();
    await this.#flusher.drain();
    await this.#ownership.close();
    this.#membership.stop();
    this.#liveness.stop();
    for (const sub of this.#partitionSubs.values()) sub.unsubscribe();
    this.#partitionSubs.clear();
    if (this.#antiEntropyTimer !== undefined) this.#clock.clearTimeout(this.#antiEntropyTimer);
    if (this.#acquiredTimer !== undefined) this.#clock.clearTimeout(this.#acquiredTimer);
    for (const sub of this.#subs) sub.unsubscribe();
    this.#flusher.close();
    if (this.#sweepTimer !== undefined) this.#clock.clearTimeout(this.#sweepTimer);
    this.#status = "stopped";
    this.#log.info("counter node stopped");
  }

  // --- ActorHost ---------------------------------------------------------------------------------

  now(): number {
    return this.#clock.now();
  }

  markDirty(actor: PageActor): void {
    this.#dirty.add(actor);
    this.#flusher.request();
  }

  wakeAt(actor: PageActor, at: number): void {
    const current = this.#wake.get(actor);
    if (current === undefined || at < current) this.#wake.set(actor, at);
  }

  // --- requests ----------------------------------------------------------------------------------

  async #serve(data: Uint8Array): Promise<Uint8Array> {
    let request: NodeRequest;
    try {
      request = decodeNodeRequest(data);
      if (
        (request.type === "presence" || request.type === "presence_sync") &&
        request.partition >= this.#config.partitions
      ) {
        throw new ProtocolError("bad_frame", `partition ${request.partition} is out of range`);
      }
    } catch (err) {
      this.#log.warn({ err }, "malformed request");
      const code = err instanceof ProtocolError ? err.code : "bad_frame";
      return encodeMessage(errorReply(code, err instanceof Error ? err.message : undefined));
    }
    try {
      return encodeMessage(await this.#handle(request));
    } catch (err) {
      this.#log.error({ err, type: request.type }, "request failed");
      return encodeMessage(errorReply(err instanceof ProtocolError ? err.code : "internal"));
    }
  }

  async #handle(request: NodeRequest): Promise<NodeReply> {
    if (this.#status !== "running") return errorReply("unavailable", "counter node is stopping");
    // Any node answers a listing: it reads the data center's store, not a partition's actors.
    if (request.type === "list_pages") return listPages(this.#store, request);
    const partition =
      request.type === "presence" || request.type === "presence_sync"
        ? request.partition
        : partitionOf(request.page, this.#config.partitions);
    const owner = this.#membership.ring.ownerOf(partition);
    if (owner !== this.#config.nodeId) {
      // Presence is never forwarded: a batch or sync is only valid in order with what its gateway
      // sent that owner, and a forwarded one could land after the gateway's resync with the new
      // owner, bringing back viewers who left. The gateway routes it again itself.
      if (request.type === "presence" || request.type === "presence_sync") {
        return errorReply("unavailable", `partition ${partition} belongs to ${owner ?? "no live node"}`);
      }
      return this.#forward(owner, request);
    }
    // A presence batch is a delta, valid only on top of what its gateway sent before: it never waits
    // for a lease. Applied after a wait (the gateway timed out, resynced elsewhere, and holds nobody
    // here any more) it would bring back viewers who left. The gateway retries it.
    const fence =
      request.type === "presence"
        ? this.#ownership.fenceOf(partition)
        : await this.#ownership.whenHeld(partition, this.#config.partitionLeaseMs * OWNERSHIP_WAIT_FACTOR);
    if (fence === undefined) return errorReply("unavailable", `partition ${partition} is not owned yet`);
    switch (request.type) {
      case "presence":
        return this.#presence(request);
      case "presence_sync":
        return this.#presenceSync(request);
      case "snapshot":
        return this.#snapshot(request.page, partition);
      case "increment":
        return this.#increment(request, partition);
      case "reset":
        return this.#reset(request, partition);
    }
  }

  async #forward(owner: string | undefined, request: NodeRequest): Promise<NodeReply> {
    if (owner === undefined) return errorReply("unavailable", "no counter node is live");
    if ((request.hop ?? 0) >= MAX_HOPS)
      return errorReply("unavailable", "owners disagree about the ring; retry");
    this.#metrics.forwards.inc();
    const forwarded = encodeMessage({ ...request, hop: (request.hop ?? 0) + 1 });
    const reply = await this.#bus.request(nodeSubject(this.dc, owner), forwarded, {
      timeoutMs: this.#config.partitionLeaseMs * 2,
    });
    return decodeNodeReply(reply);
  }

  async #presence(batch: PresenceBatch): Promise<NodeReply> {
    const lease = this.#touchGateway(batch.gateway);
    const byPage = new Map<string, Array<{ viewer: string; present: boolean }>>();
    for (const op of batch.ops) {
      let ops = byPage.get(op.page);
      if (ops === undefined) {
        // Checked once per page, not per op: hashing every op's page would cost more than the op.
        if (partitionOf(op.page, this.#config.partitions) !== batch.partition) {
          return errorReply(
            "bad_frame",
            `page ${JSON.stringify(op.page)} is not in partition ${batch.partition}`,
          );
        }
        byPage.set(op.page, (ops = []));
      }
      ops.push(op);
    }
    const loading: Array<Promise<void>> = [];
    for (const [page, ops] of byPage) {
      const apply = (actor: PageActor): void => {
        lease.pages.add(page);
        actor.presenceOps(batch.gateway, ops);
      };
      // An active actor handles it now (its mailbox is empty); only a loading one costs a promise.
      const actor = this.#actors.get(page);
      if (actor?.status === "active") apply(actor);
      else loading.push(this.#inActor(page, batch.partition, apply));
    }
    if (loading.length > 0) await Promise.all(loading);
    this.#metrics.presenceOps.inc(batch.ops.length);
    return { type: "ack" };
  }

  async #presenceSync(sync: PresenceSync): Promise<NodeReply> {
    const lease = this.#touchGateway(sync.gateway);
    const pages = new Set(Object.keys(sync.pages));
    for (const page of pages) {
      if (partitionOf(page, this.#config.partitions) !== sync.partition) {
        return errorReply("bad_frame", `page ${JSON.stringify(page)} is not in partition ${sync.partition}`);
      }
    }
    // Pages the gateway held here before but no longer lists: it holds nobody there now.
    for (const page of lease.pages) {
      if (!pages.has(page) && partitionOf(page, this.#config.partitions) === sync.partition) pages.add(page);
    }
    await Promise.all(
      [...pages].map((page) =>
        this.#inActor(page, sync.partition, (actor) => {
          const viewers = sync.pages[page] ?? [];
          if (viewers.length > 0) lease.pages.add(page);
          actor.replaceGateway(sync.gateway, viewers);
        }),
      ),
    );
    return { type: "ack" };
  }

  async #snapshot(page: string, partition: number): Promise<NodeReply> {
    return this.#inActor(page, partition, (actor) => ({
      type: "page_state",
      page,
      counters: actor.snapshot(),
      ts: this.#clock.now(),
    }));
  }

  async #increment(request: IncrementRequest, partition: number): Promise<NodeReply> {
    if (!isPageId(request.page)) return errorReply("invalid_page");
    if (!isCounterName(request.counter) || request.counter === VIEWERS_COUNTER)
      return errorReply("invalid_counter");
    if (!Number.isSafeInteger(request.delta))
      return errorReply("invalid_body", "delta must be a safe integer");
    return new Promise<NodeReply>((resolve, reject) => {
      const actor = this.#actor(request.page, partition);
      actor.run((failure) => {
        if (failure !== undefined) return reject(failure);
        this.#increments.push({ actor, request, resolve });
        this.#scheduleIncrements();
      });
    });
  }

  async #reset(request: ResetRequest, partition: number): Promise<NodeReply> {
    if (!isPageId(request.page)) return errorReply("invalid_page");
    if (!isCounterName(request.counter)) return errorReply("invalid_counter");
    return new Promise<NodeReply>((resolve, reject) => {
      const actor = this.#actor(request.page, partition);
      actor.run((failure) => {
        if (failure !== undefined) return reject(failure);
        resolve(this.#resets.enqueue(actor, request));
        // On the increments' chain: every earlier change of the counter is applied when it runs.
        this.#chain(() => this.#resets.commit(), "reset round");
      });
    });
  }

  // --- durable increments: group commit ---------------------------------------------------------

  #scheduleIncrements(): void {
    if (this.#incrementsScheduled) return;
    this.#incrementsScheduled = true;
    setImmediate(() => {
      this.#incrementsScheduled = false;
      this.#chain(() => this.#commitIncrements(), "increment batch");
    });
  }

  /**
   * Appends a step to the commit chain. A step that throws is logged and the chain goes on: a bug
   * in one batch must neither crash the node nor hold every later change. Requests the failed step
   * did not answer time out at their gateway, and their retries (same keys) count once.
   */
  #chain(step: () => Promise<void>, what: string): void {
    this.#incrementsInFlight = this.#incrementsInFlight.then(step).catch((err: unknown) => {
      this.#log.error({ err }, `${what} failed`);
    });
  }

  async #drainIncrements(): Promise<void> {
    while (this.#increments.length > 0 || this.#incrementsScheduled) {
      await new Promise((r) => setImmediate(r));
      await this.#incrementsInFlight;
    }
    await this.#incrementsInFlight;
  }

  /**
   * Sends every pending increment to the store in one round trip. Each op's answer (value and time)
   * is computed before sending and stored with its key, so a retry gets the very same answer.
   */
  async #commitIncrements(): Promise<void> {
    const batch = this.#increments;
    this.#increments = [];
    if (batch.length === 0) return;
    const now = this.#clock.now();
    const running = new Map<string, number>();
    /** The op carrying each distinct (key, counter, change) of this batch. */
    const opByRequest = new Map<string, number>();
    const keysInBatch = new Set<string>();
    const ops: IncrementOp[] = [];
    const sent: Array<
      { pending: PendingIncrement; value: number } | { pending: PendingIncrement; sameAs: number }
    > = [];
    for (const pending of batch) {
      const { actor, request } = pending;
      const fence = this.#ownership.fenceOf(actor.partition);
      if (fence === undefined || actor.status === "closed") {
        pending.resolve(errorReply("unavailable", "the page's owner changed; retry"));
        continue;
      }
      const keyId = `${request.page}\u0000${request.key}`;
      const requestId = `${keyId}\u0000${request.counter}\u0000${request.delta}`;
      const same = opByRequest.get(requestId);
      if (same !== undefined) {
        sent.push({ pending, sameAs: same });
        continue;
      }
      const counterId = `${request.page}\u0000${request.counter}`;
      const value = (running.get(counterId) ?? actor.value(request.counter)) + request.delta;
      // A different change under a key already in this batch never applies: the store handles ops in
      // order and answers it as a conflict (or as the duplicate of an older change under that key).
      if (!keysInBatch.has(keyId)) running.set(counterId, value);
      keysInBatch.add(keyId);
      opByRequest.set(requestId, ops.length);
      ops.push({
        fence,
        page: request.page,
        counter: request.counter,
        dc: this.dc,
        delta: request.delta,
        key: request.key,
        payload: JSON.stringify({ value, updatedAt: now }),
      });
      sent.push({ pending, value });
    }
    if (ops.length === 0) return;
    let outcomes;
    try {
      this.#metrics.storeWrites.inc();
      outcomes = await this.#store.increment(ops, this.#config.idempotencyTtlMs);
    } catch (err) {
      this.#log.error({ err, ops: ops.length }, "increment batch failed");
      for (const s of sent) s.pending.resolve(errorReply("unavailable", "the store did not answer; retry"));
      return;
    }
    const replies: NodeReply[] = [];
    /** page -> its durable entries this batch applied or found applied, published before any reply. */
    const durable = new Map<string, { partition: number; counters: Map<string, Entry> }>();
    const keepDurable = (actor: PageActor, counter: string, entry: Entry): void => {
      let page = durable.get(actor.page);
      if (page === undefined)
        durable.set(actor.page, (page = { partition: actor.partition, counters: new Map() }));
      page.counters.set(counter, entry);
    };
    let opIndex = 0;
    for (const s of sent) {
      const { actor, request } = s.pending;
      if ("sameAs" in s) {
        const original = replies[s.sameAs];
        s.pending.resolve(
          original?.type === "incremented"
            ? { ...original, duplicate: true }
            : (original ?? errorReply("internal")),
        );
        continue;
      }
      const op = ops[opIndex]!;
      const outcome = outcomes[opIndex++];
      let reply: NodeReply;
      switch (outcome?.kind) {
        case "applied":
          actor.applied(request.counter, outcome.entry);
          keepDurable(actor, request.counter, outcome.entry);
          reply = {
            type: "incremented",
            page: request.page,
            counter: request.counter,
            value: s.value,
            updatedAt: now,
            duplicate: false,
          };
          this.#metrics.increments.inc({ outcome: "applied" });
          break;
        case "duplicate": {
          const original = JSON.parse(outcome.payload) as { value: number; updatedAt: number };
          reply = {
            type: "incremented",
            page: request.page,
            counter: request.counter,
            value: original.value,
            updatedAt: original.updatedAt,
            duplicate: true,
          };
          // The first try may have become durable and never been published (its owner crashed, or
          // handed the page over, in between): publishing the entry again costs one message.
          keepDurable(actor, request.counter, actor.ownEntry(request.counter));
          this.#metrics.increments.inc({ outcome: "duplicate" });
          break;
        }
        case "conflict":
          reply = errorReply("idempotency_conflict");
          this.#metrics.increments.inc({ outcome: "conflict" });
          break;
        default:
          reply = errorReply("unavailable", "the page's owner changed; retry");
          this.#metrics.increments.inc({ outcome: "stale" });
          void this.#onPartitionLoss(op.fence.partition, "lost");
      }
      replies[opIndex - 1] = reply;
      s.pending.resolve(reply);
    }
    // Published now, not by the next flush: the replies go out after this (they wait for the
    // microtasks of the resolved requests), so a change is never acknowledged unpublished, even if
    // the process dies or the page's actor closes right after.
    const ts = this.#clock.now();
    // fromEntries defines own properties: a counter named "__proto__" stays a counter.
    for (const [page, { partition, counters }] of durable) {
      this.#publishOwn(page, partition, Object.fromEntries(counters), ts);
      this.#changedAt.set(page, ts);
    }
  }

  // --- actors ------------------------------------------------------------------------------------

  #actor(page: string, partition: number): PageActor {
    const existing = this.#actors.get(page);
    if (existing !== undefined && existing.status !== "closed") return existing;
    const settleAt = this.#settleAt.get(partition) ?? 0;
    const actor = new PageActor(this, page, partition, settleAt > this.#clock.now() ? settleAt : 0);
    this.#actors.set(page, actor);
    this.#metrics.actors.set(this.#actors.size);
    if (actor.settleAt !== 0) this.#unsettled.add(actor);
    this.#store.load(page).then(
      (record) => actor.loaded(record),
      (err) => {
        this.#log.error({ err, page }, "page load failed");
        if (this.#actors.get(page) === actor) this.#actors.delete(page);
        actor.close(err);
      },
    );
    return actor;
  }

  /** Runs `work` in the page's actor and resolves with its result. */
  #inActor<T>(page: string, partition: number, work: (actor: PageActor) => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const actor = this.#actor(page, partition);
      actor.run((failure) => {
        if (failure !== undefined) reject(failure);
        else resolve(work(actor));
      });
    });
  }

  // --- persistence and publication ---------------------------------------------------------------

  /** Persists every dirty page's own entries in one round trip, then publishes what became durable. */
  async #flush(): Promise<void> {
    const actors = [...this.#dirty];
    this.#dirty.clear();
    const groups = new Map<number, FencedWrites & { writes: FencedWrites["writes"][number][] }>();
    const taken: Array<{
      actor: PageActor;
      writes: ReturnType<PageActor["takeUnwritten"]>;
      /** Own entries as of this write: exactly what is durable once it succeeds, so what may be published. */
      entries: Record<string, Entry> | undefined;
    }> = [];
    for (const actor of actors) {
      if (actor.status !== "active") continue;
      const fence = this.#ownership.fenceOf(actor.partition);
      if (fence === undefined) continue;
      const writes = actor.takeUnwritten();
      // Taken together with the writes: a change made during the round trip is published by the
      // next flush, after its own write.
      const entries = actor.takeUnpublished() ? actor.ownEntries() : undefined;
      taken.push({ actor, writes, entries });
      if (writes.length === 0) continue;
      let group = groups.get(actor.partition);
      if (group === undefined) groups.set(actor.partition, (group = { fence, writes: [] }));
      group.writes.push(...writes);
    }
    const stopTimer = this.#metrics.flushSeconds.startTimer();
    let stale;
    try {
      if (groups.size > 0) this.#metrics.storeWrites.inc();
      stale = groups.size > 0 ? await this.#store.write([...groups.values()]) : [];
    } catch (err) {
      this.#metrics.flushFailures.inc();
      for (const { actor, writes, entries } of taken) {
        actor.restoreUnwritten(writes, entries !== undefined);
        this.#dirty.add(actor);
      }
      // Retried on the next window; nothing is published ahead of the store.
      this.#flusher.request();
      throw err;
    } finally {
      stopTimer();
    }
    this.#metrics.flushes.inc();
    const lost = new Set(stale.map((f) => f.partition));
    for (const partition of lost) void this.#onPartitionLoss(partition, "lost");
    const ts = this.#clock.now();
    for (const { actor, entries } of taken) {
      if (lost.has(actor.partition) || entries === undefined) continue;
      this.#publishOwn(actor.page, actor.partition, entries, ts);
      this.#changedAt.set(actor.page, ts);
    }
  }

  #publishOwn(page: string, partition: number, counters: Record<string, Entry>, ts: number): void {
    const update = encodeMessage({ type: "update", page, dc: this.dc, counters, ts });
    const subject = this.#actors.get(page)?.subject ?? pageSubject(page, partition);
    this.#bus.publish(subject, update);
    this.#metrics.publishes.inc();
  }

  // --- replication across data centers ------------------------------------------------------------

  #onPartitionAcquired(partition: number): void {
    // Presence resyncs from gateways start now (a takeover, or taking back a lost lease): pages
    // with stored viewers hold them until every gateway had time to resync.
    this.#settleAt.set(partition, this.#clock.now() + this.#config.settleMs);
    if (this.#partitionSubs.has(partition)) return;
    const sub = this.#bus.subscribe(partitionPagesSubject(partition), (data, subject) =>
      this.#onRemoteUpdate(partition, data, subject),
    );
    this.#partitionSubs.set(partition, sub);
    // While nobody here owned the partition (a crashed owner's lease running out, a whole DC
    // restarting), other DCs' updates of its pages were dropped: ask them again, for the partitions
    // taken in this turn at once.
    this.#acquiredUnsynced.add(partition);
    this.#acquiredTimer ??= this.#clock.setTimeout(() => this.#askForAcquired(), 0);
    void this.#wakeLeftBehind(partition);
  }

  /**
   * Wakes every page of the partition whose stored presence in this DC is not zero. A dead owner may
   * have left viewers there that no gateway holds any more; nobody might touch the page again, and
   * other DCs would keep counting them. Woken, the page settles and its entry follows presence.
   */
  async #wakeLeftBehind(partition: number): Promise<void> {
    let refs;
    try {
      refs = await this.#store.nonZeroEntries(partition);
    } catch (err) {
      this.#log.error(
        { err, partition },
        "could not list pages with presence; they correct when next touched",
      );
      return;
    }
    if (this.#ownership.fenceOf(partition) === undefined) return;
    for (const ref of refs) {
      if (ref.counter === VIEWERS_COUNTER && ref.dc === this.dc) this.#actor(ref.page, partition);
    }
  }

  /** Asks every live remote DC for everything it remembers changing on the partitions just taken. */
  #askForAcquired(): void {
    this.#acquiredTimer = undefined;
    const partitions = [...this.#acquiredUnsynced].filter((p) => this.#partitionSubs.has(p));
    this.#acquiredUnsynced = new Set();
    if (partitions.length === 0 || this.#status !== "running") return;
    // A DC not heard yet is asked on first contact instead (#onDcEvent).
    for (const remote of this.#liveness.liveRemotes()) {
      this.#bus.publish(
        DCS_SUBJECT,
        encodeMessage({ type: "resync", dc: remote.dc, from: this.dc, since: 0, partitions }),
      );
    }
  }

  /** Another DC's owner published its entries of a page we own here: merge and persist them. */
  #onRemoteUpdate(partition: number, data: Uint8Array, subject: string): void {
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (err) {
      this.#log.warn({ err, subject }, "malformed page update");
      return;
    }
    if (msg.type !== "update" || msg.dc === this.dc || pageFromSubject(subject) !== msg.page) return;
    if (this.#ownership.fenceOf(partition) === undefined) return;
    this.#actor(msg.page, partition).run((failure) => {
      if (failure === undefined) this.#actors.get(msg.page)?.mergeRemote(msg.dc, msg.counters);
    });
  }

  #onDcEvent(remote: string, event: DcEvent): void {
    if (event.kind === "down") return;
    // We may have missed what `remote` published meanwhile: ask its owners to publish it again.
    this.#bus.publish(
      DCS_SUBJECT,
      encodeMessage({ type: "resync", dc: remote, from: this.dc, since: event.since }),
    );
    // And `remote` may have missed what we published. It asks us too when it hears us again, but a
    // NATS gateway link is one connection per direction and they come back one at a time: if it
    // heard us first, its request went out while its way to us was still down, and is lost. Of the
    // two DCs, the one that hears the other last does so with both ways up, and it both asks and
    // publishes again unasked; so whatever the order, both sides get everything.
    const now = this.#clock.now();
    const pushed = this.#resyncPushed.get(remote);
    // Every remote node's heartbeats show the same gap: publish once per burst.
    if (pushed !== undefined && now - pushed.at < RESYNC_DEBOUNCE_MS && pushed.since <= event.silentSince)
      return;
    this.#resyncPushed.set(remote, { at: now, since: event.silentSince });
    this.#resync(event.silentSince);
  }

  #onDcMessage(data: Uint8Array): void {
    let msg;
    try {
      msg = decodeMessage(data);
    } catch {
      return; // DcLiveness logs malformed messages on this subject.
    }
    if (msg.type !== "resync" || msg.dc !== this.dc || msg.from === this.dc) return;
    if (msg.partitions !== undefined) {
      // A new owner's request (rare, one per takeover): always served.
      this.#resync(msg.since, new Set(msg.partitions));
      return;
    }
    const now = this.#clock.now();
    const served = this.#resyncServed.get(msg.from);
    if (served !== undefined && now - served.at < RESYNC_DEBOUNCE_MS && served.since <= msg.since) return;
    this.#resyncServed.set(msg.from, { at: now, since: msg.since });
    this.#resync(msg.since);
  }

  #resync(since: number, partitions?: ReadonlySet<number>): void {
    void this.#republishSince(Math.max(0, since - RESYNC_MARGIN_MS), partitions).catch((err: unknown) =>
      this.#log.error({ err }, "resync failed"),
    );
  }

  /**
   * Publishes again this DC's entries of every page changed here since `since` (of `partitions`
   * only, when given): from the actor when it is in memory with nothing left to write, else from the
   * store (durable by definition: an entry is never published ahead of the store). Publishing an
   * older entry is harmless: receivers keep the per-entry max.
   */
  async #republishSince(since: number, partitions?: ReadonlySet<number>): Promise<void> {
    const pages = [...this.#changedAt]
      .filter(
        ([page, at]) =>
          at >= since &&
          (partitions === undefined || partitions.has(partitionOf(page, this.#config.partitions))),
      )
      .map(([page]) => page);
    this.#log.info(
      { pages: pages.length, since, partitions: partitions?.size },
      "publishing changes again for a resync",
    );
    for (let i = 0; i < pages.length; i += RESYNC_CHUNK) {
      const chunk = pages.slice(i, i + RESYNC_CHUNK);
      const ts = this.#clock.now();
      await Promise.all(
        chunk.map(async (page) => {
          const partition = partitionOf(page, this.#config.partitions);
          const actor = this.#actors.get(page);
          if (actor?.status === "active" && !actor.hasPendingWork)
            return this.#publishOwn(page, partition, actor.ownEntries(), ts);
          const record = await this.#store.load(page);
          const own = Object.fromEntries(
            Object.entries(record).flatMap(([name, entries]) => {
              const e = entries[this.dc];
              return e === undefined ? [] : [[name, e] as const];
            }),
          );
          if (Object.keys(own).length > 0) this.#publishOwn(page, partition, own, ts);
        }),
      );
      await new Promise((r) => setImmediate(r));
    }
  }

  /** For safety, now and then: publish again what changed in the last two periods. */
  #scheduleAntiEntropy(): void {
    this.#antiEntropyTimer = this.#clock.setTimeout(() => {
      const now = this.#clock.now();
      for (const [page, at] of this.#changedAt)
        if (now - at > CHANGE_LOG_RETENTION_MS) this.#changedAt.delete(page);
      if (this.#liveness.hasRemotes) {
        void this.#republishSince(now - 2 * this.#config.antiEntropyMs).catch((err: unknown) =>
          this.#log.error({ err }, "anti-entropy failed"),
        );
      }
      if (this.#status === "running") this.#scheduleAntiEntropy();
    }, this.#config.antiEntropyMs);
  }

  // --- ownership ---------------------------------------------------------------------------------

  async #setWanted(partitions: number[]): Promise<void> {
    try {
      await this.#ownership.setWanted(partitions);
    } catch (err) {
      this.#log.error({ err }, "ownership change failed; retrying on the next lease cycle");
    }
  }

  /** Drops a partition's actors: after flushing them when handing over, at once when lost. */
  async #onPartitionLoss(partition: number, reason: LossReason): Promise<void> {
    if (reason === "released") {
      await this.#drainIncrements();
      await this.#flusher.drain();
    }
    for (const [page, actor] of this.#actors) {
      if (actor.partition !== partition) continue;
      this.#actors.delete(page);
      this.#dirty.delete(actor);
      this.#wake.delete(actor);
      this.#unsettled.delete(actor);
      actor.close();
    }
    this.#settleAt.delete(partition);
    this.#partitionSubs.get(partition)?.unsubscribe();
    this.#partitionSubs.delete(partition);
    this.#metrics.actors.set(this.#actors.size);
    this.#log.info({ partition, reason }, "partition dropped");
    // The partition's presence went with its actors, and its next owner may be this node again
    // with no ring change (the lease ran out while Redis was unreachable, or during a stall): only
    // a new incarnation makes the gateways resync what they hold here.
    if (reason === "lost" && this.#status === "running") this.#renewIncarnation();
  }

  #renewIncarnation(): void {
    if (this.#renewingIncarnation) return;
    this.#renewingIncarnation = true;
    setImmediate(() => {
      this.#renewingIncarnation = false;
      if (this.#status !== "running") return;
      this.#membership.renewIncarnation();
      this.#log.warn({ incarnation: this.#membership.incarnation }, "presence state lost; new incarnation");
    });
  }

  // --- gateway leases ----------------------------------------------------------------------------

  #touchGateway(gateway: string, leaseMs = this.#config.gatewayLeaseMs): GatewayLease {
    let lease = this.#gateways.get(gateway);
    if (lease === undefined) {
      lease = { lastSeen: this.#clock.now(), leaseMs, pages: new Set() };
      this.#gateways.set(gateway, lease);
    }
    lease.lastSeen = this.#clock.now();
    lease.leaseMs = leaseMs;
    return lease;
  }

  #onGatewayHeartbeat(data: Uint8Array): void {
    let msg;
    try {
      msg = decodeMessage(data);
    } catch (err) {
      this.#log.warn({ err }, "malformed gateway heartbeat");
      return;
    }
    if (msg.type !== "gateway") return;
    if (msg.state === "up") {
      this.#touchGateway(msg.gateway, msg.leaseMs);
      return;
    }
    // A gateway shutting down closed its sockets: its viewers linger for the grace window while
    // they reconnect elsewhere.
    const lease = this.#gateways.get(msg.gateway);
    if (lease === undefined) return;
    this.#gateways.delete(msg.gateway);
    for (const page of lease.pages)
      this.#actors
        .get(page)
        ?.run((failure) => failure ?? this.#actors.get(page)?.replaceGateway(msg.gateway, []));
  }

  // --- timers ------------------------------------------------------------------------------------

  #scheduleSweep(): void {
    this.#sweepTimer = this.#clock.setTimeout(() => {
      try {
        this.#sweep();
      } catch (err) {
        this.#log.error({ err }, "sweep failed");
      }
      if (this.#status === "running") this.#scheduleSweep();
    }, this.#config.sweepMs);
  }

  #sweep(): void {
    const now = this.#clock.now();
    // Time this process did not run (paused, starved, a long GC) is not time the gateways were
    // silent: their heartbeats wait in the socket, read right after this sweep. Without this, a node
    // frozen longer than a gateway lease would drop every viewer of every gateway on resuming, and
    // no gateway resyncs after that.
    const stalledMs = now - this.#lastSweepAt - this.#config.sweepMs;
    if (this.#lastSweepAt > 0 && stalledMs > this.#config.sweepMs) {
      for (const lease of this.#gateways.values()) lease.lastSeen += stalledMs;
    }
    this.#lastSweepAt = now;
    for (const [actor, at] of this.#wake) {
      if (at > now) continue;
      this.#wake.delete(actor);
      if (actor.status === "active") actor.tick(now);
    }
    for (const actor of this.#unsettled) {
      if (actor.status === "closed") this.#unsettled.delete(actor);
      else if (actor.status === "active" && actor.settleAt <= now) {
        this.#unsettled.delete(actor);
        actor.settle();
      }
    }
    for (const [gateway, lease] of this.#gateways) {
      if (lease.lastSeen + lease.leaseMs > now) continue;
      this.#gateways.delete(gateway);
      this.#metrics.gatewayExpiries.inc();
      this.#log.warn({ gateway, pages: lease.pages.size }, "gateway lease lapsed; dropping its viewers");
      for (const page of lease.pages) {
        const actor = this.#actors.get(page);
        if (actor?.status === "active") actor.dropGateway(gateway);
      }
    }
    if (++this.#sweeps % PASSIVATION_SWEEPS === 0) this.#passivate(now);
  }

  #passivate(now: number): void {
    for (const [page, actor] of this.#actors) {
      if (!actor.isIdle || this.#dirty.has(actor) || now - actor.lastActive < this.#config.passivateMs)
        continue;
      this.#actors.delete(page);
      this.#wake.delete(actor);
      this.#unsettled.delete(actor);
      for (const lease of this.#gateways.values()) lease.pages.delete(page);
    }
    this.#metrics.actors.set(this.#actors.size);
  }
}
