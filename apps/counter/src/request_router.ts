import { BusError, nodeSubject, type Bus } from "@livecount/bus";
import {
  MAX_SNAPSHOT_REPLY_BYTES,
  pageStateBytes,
  ProtocolError,
  decodeNodeReply,
  decodeNodeRequest,
  encodeIncrementsDone,
  encodeMessage,
  type IncrementRequest,
  type IncrementsReply,
  type IncrementsRequest,
  type ListPagesRequest,
  type NodeInfoReply,
  type NodeReply,
  type NodeRequest,
  type PurgedReply,
  type SnapshotsReply,
  type SnapshotsRequest,
} from "@livecount/protocol";
import { partitionOf, type HashRing } from "@livecount/ring";
import { LogThrottle, type Logger } from "@livecount/runtime";
import { StoreError, type Fence, type Store } from "@livecount/store";
import type { ActorRegistry } from "./actor_registry.js";
import type { CounterMetrics } from "./counter_metrics.js";
import type { DurableWriter } from "./durable_writer.js";
import { errorReply } from "./replies.js";
import { ActorClosedError, type PageActor } from "./page_actor.js";
import { SeriesCache, readStats } from "./stats_read.js";
import { readWindow } from "./window_read.js";
import type { PresenceIntake } from "./presence_intake.js";

export interface RequestRouterOptions {
  readonly dc: string;
  readonly nodeId: string;
  readonly partitions: number;
  /** How long a forwarded request may take: the owner may itself be waiting for a lease. */
  readonly forwardTimeoutMs: number;
  /** How long a request waits for its partition's lease (a takeover waits out the old owner's lease). */
  readonly ownershipWaitMs: number;
  readonly bus: Bus;
  readonly store: Store;
  readonly logger: Logger;
  readonly metrics: CounterMetrics;
  readonly ring: () => HashRing;
  readonly fenceOf: (partition: number) => Fence | undefined;
  readonly whenHeld: (partition: number, timeoutMs: number) => Promise<Fence | undefined>;
  /** The fence `whenHeld` would resolve with right now, or undefined when it would wait. */
  readonly servingFence: (partition: number) => Fence | undefined;
  readonly registry: ActorRegistry;
  readonly intake: PresenceIntake;
  readonly writer: DurableWriter;
  readonly isRunning: () => boolean;
  /** This node's own state, for the status API (any node answers for itself). */
  readonly nodeInfo: () => NodeInfoReply;
  /** Purges this node's partitions (tombstone_purge.ts); any node answers for itself. */
  readonly purge: (olderThanMs: number) => Promise<PurgedReply>;
}

/** Increments of several publisher requests or snapshots of several pages in one bus request, and every other request. */
type BatchRequest = Extract<NodeRequest, IncrementsRequest>;
type SnapshotsBatch = Extract<NodeRequest, SnapshotsRequest>;
type SingleRequest = Exclude<NodeRequest, IncrementsRequest | SnapshotsRequest>;

type PresenceRequest = Extract<
  NodeRequest,
  { type: "presence" | "presence_pages" | "presence_sync" | "presence_sync_part" }
>;

/** A gateway's presence: about one partition, served by its owner only, never forwarded. */
function isPresence(request: NodeRequest): request is PresenceRequest {
  return (
    request.type === "presence" ||
    request.type === "presence_pages" ||
    request.type === "presence_sync" ||
    request.type === "presence_sync_part"
  );
}

/** A request is forwarded at most once: owners that disagree about the ring answer "unavailable". */
const MAX_HOPS = 1;

/**
 * A counter node's requests: decoded once, then served (this node owns the page's partition),
 * forwarded (a read or a change for a partition another node owns) or refused (presence for a
 * partition this node does not hold: its gateway routes it again itself).
 */
export class RequestRouter {
  readonly #o: RequestRouterOptions;
  /** Pages' registers and peaks, read for stats at most once a second each. */
  readonly #series = new SeriesCache();
  /** Lines that can repeat per request or message, throttled (LogThrottle). */
  readonly #logs = new LogThrottle();

  constructor(options: RequestRouterOptions) {
    this.#o = options;
  }

  /** The bus responder: never throws, every failure is an error reply with a stable code. */
  async serve(data: Uint8Array): Promise<Uint8Array> {
    let request: NodeRequest;
    try {
      request = decodeNodeRequest(data);
      if (isPresence(request) && request.partition >= this.#o.partitions) {
        throw new ProtocolError("bad_frame", `partition ${request.partition} is out of range`);
      }
    } catch (err) {
      this.#logs.log(this.#o.logger, "warn", { err }, "malformed request");
      const code = err instanceof ProtocolError ? err.code : "bad_frame";
      return encodeMessage(errorReply(code, err instanceof Error ? err.message : undefined));
    }
    if (request.type === "increments") return encodeIncrementsDone(await this.#increments(request));
    if (request.type === "snapshots") return encodeMessage(await this.#snapshots(request));
    return encodeMessage(await this.#answer(request));
  }

  /** The reply to one request: its route's, or the error reply its failure maps to. */
  async #answer<T extends SingleRequest>(request: T): Promise<NodeReply> {
    try {
      return await this.#route(request);
    } catch (err) {
      // The page's actor closed under the request (its partition moved on), or the store did not
      // answer: either way the caller retries.
      if (err instanceof ActorClosedError) return errorReply("unavailable", err.message);
      if (err instanceof StoreError) return errorReply("unavailable", "the store did not answer; retry");
      this.#logs.log(this.#o.logger, "error", { err, type: request.type }, "request failed");
      return errorReply(err instanceof ProtocolError ? err.code : "internal");
    }
  }

  /**
   * A gateway's batch of increments: each item as its own request would be (they share the next
   * group commit), each answered on its own. An item of a page this node serves right now goes
   * straight to its actor and the commit queue; any other takes the general route (forwarded,
   * waiting for its lease, or refused).
   */
  #increments(request: BatchRequest): Promise<IncrementsReply> {
    const { hop, items } = request;
    const replies = new Array<IncrementsReply["replies"][number]>(items.length);
    let left = items.length;
    return new Promise((resolve) => {
      items.forEach((item, i) => {
        const settle = (r: NodeReply): void => {
          replies[i] =
            r.type === "incremented" || r.type === "error" ? r : errorReply("internal", `got ${r.type}`);
          if (--left === 0) resolve({ type: "increments_done", replies });
        };
        const single = hop === undefined ? item : { ...item, hop };
        if (!this.#incrementNow(single, settle)) void this.#answer(single).then(settle);
      });
    });
  }

  /**
   * A gateway's snapshots of the pages it started watching in one turn: each page as its own
   * `snapshot` would be (forwarded, waiting for its lease, or refused), in order, answered once the
   * slowest is. A page that would take the reply past MAX_SNAPSHOT_REPLY_BYTES is answered
   * payload_too_large, so the reply stays within the bus's payload limit; the gateway asks for it
   * on its own.
   */
  async #snapshots(request: SnapshotsBatch): Promise<SnapshotsReply> {
    const { hop, pages } = request;
    const replies = await Promise.all(
      pages.map((page) =>
        this.#answer(hop === undefined ? { type: "snapshot", page } : { type: "snapshot", page, hop }),
      ),
    );
    let bytes = 0;
    return {
      type: "page_states",
      replies: replies.map((reply) => {
        if (reply.type === "error") return reply;
        if (reply.type !== "page_state") return errorReply("internal", `got ${reply.type}`);
        const size = pageStateBytes(reply);
        if (bytes + size > MAX_SNAPSHOT_REPLY_BYTES)
          return errorReply("payload_too_large", "past the reply's size; ask for this page on its own");
        bytes += size;
        return reply;
      }),
    };
  }

  /**
   * Queues an increment of a page whose partition this node owns and serves now, answering it
   * through `settle` as #route would; false (nothing done) for any other.
   */
  #incrementNow(request: IncrementRequest, settle: (reply: NodeReply) => void): boolean {
    if (!this.#o.isRunning()) return false;
    const partition = partitionOf(request.page, this.#o.partitions);
    if (this.#o.ring().ownerOf(partition) !== this.#o.nodeId) return false;
    if (this.#o.servingFence(partition) === undefined) return false;
    let actor: PageActor;
    try {
      actor = this.#o.registry.get(request.page, partition);
    } catch {
      // The general route meets the same failure and answers it as any request's.
      return false;
    }
    actor.run((failure) => {
      // Closed under the request (its partition moved on): the caller retries, as in #answer.
      if (failure !== undefined) settle(errorReply("unavailable", failure.message));
      else this.#o.writer.queueIncrement(actor, request, settle);
    });
    return true;
  }

  async #route(request: SingleRequest): Promise<NodeReply> {
    if (!this.#o.isRunning()) return errorReply("unavailable", "counter node is stopping");
    // Any node answers a listing: it reads the data center's store, not a partition's actors.
    if (request.type === "list_pages") return listPages(this.#o.store, request);
    if (request.type === "node_status") return this.#o.nodeInfo();
    if (request.type === "purge") return this.#o.purge(request.olderThanMs);
    const partition = isPresence(request) ? request.partition : partitionOf(request.page, this.#o.partitions);
    const owner = this.#o.ring().ownerOf(partition);
    if (owner !== this.#o.nodeId) {
      // Presence is never forwarded: a batch or sync is only valid in order with what its gateway
      // sent that owner, and a forwarded one could land after the gateway's resync with the new
      // owner, bringing back viewers who left. The gateway routes it again itself.
      if (isPresence(request)) {
        return errorReply("unavailable", `partition ${partition} belongs to ${owner ?? "no live node"}`);
      }
      return this.#forward(owner, request);
    }
    // A presence batch is a delta, valid only on top of what its gateway sent before: it never waits
    // for a lease. Applied after a wait (the gateway timed out, resynced elsewhere, and holds nobody
    // here any more) it would bring back viewers who left. The gateway retries it.
    const fence =
      request.type === "presence" || request.type === "presence_pages"
        ? this.#o.fenceOf(partition)
        : await this.#o.whenHeld(partition, this.#o.ownershipWaitMs);
    if (fence === undefined) return errorReply("unavailable", `partition ${partition} is not owned yet`);
    const { registry, writer, intake } = this.#o;
    switch (request.type) {
      case "presence":
        return intake.batch(request);
      case "presence_pages":
        return intake.pages(request);
      case "presence_sync":
        return intake.sync(request);
      case "presence_sync_part":
        return intake.syncPart(request);
      case "snapshot":
        return {
          type: "page_state",
          page: request.page,
          counters: await registry.read(request.page, partition),
          ts: registry.now(),
        };
      // Ids, names and the delta were validated by the decoder (the presence counter is no counter name).
      case "increment":
        return registry.run(request.page, partition, (actor) => writer.increment(actor, request));
      case "reset":
        // On the commit chain: every earlier change of the counter is applied when it runs.
        return registry.run(request.page, partition, (actor) => writer.reset(actor, request));
      case "window":
        return readWindow(registry, this.#o.store, request, partition);
      case "stats":
        return readStats(
          registry,
          { cache: this.#series, store: this.#o.store },
          this.#o.dc,
          request,
          partition,
        );
    }
  }

  async #forward(owner: string | undefined, request: SingleRequest): Promise<NodeReply> {
    if (owner === undefined) return errorReply("unavailable", "no counter node is live");
    if ((request.hop ?? 0) >= MAX_HOPS)
      return errorReply("unavailable", "owners disagree about the ring; retry");
    this.#o.metrics.forwards.inc();
    const forwarded = encodeMessage({ ...request, hop: (request.hop ?? 0) + 1 });
    let reply: Uint8Array;
    try {
      reply = await this.#o.bus.request(nodeSubject(this.#o.dc, owner), forwarded, {
        timeoutMs: this.#o.forwardTimeoutMs,
      });
    } catch (err) {
      // The owner is gone, hung, or still deciding: the caller retries, by then the ring or the
      // lease has moved on. Never a timeout of our own: the caller's would be a 504 after a hang.
      if (err instanceof BusError) return errorReply("unavailable", `${owner} did not answer; retry`);
      throw err;
    }
    return decodeNodeReply(reply);
  }
}

/** Answers a listing from this data center's store: any counter node can. */
async function listPages(store: Store, request: ListPagesRequest): Promise<NodeReply> {
  try {
    const list = await store.listPages(request.prefix, request.cursor, request.limit);
    return {
      type: "page_list",
      pages: list.pages,
      ...(list.cursor !== undefined ? { cursor: list.cursor } : {}),
    };
  } catch (err) {
    if (err instanceof StoreError) throw new ProtocolError("unavailable", "the store did not answer; retry");
    throw err;
  }
}
