/**
 * The counter node's units wired as the node wires them, on the in-memory bus and store, with a
 * manual clock: unit tests drive leases, graces, flushes and commits without sleeping. The store is
 * wrapped to inject failures and to log, in one timeline with the bus, when writes start and end and
 * when updates are published.
 */
import { MemoryBus, type Bus } from "@livecount/bus";
import { decodeMessage, type PageUpdate, type PageUpdates, type PresenceBatch } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { silentLogger } from "@livecount/runtime";
import {
  MemoryStore,
  PartialWriteError,
  StoreError,
  type Fence,
  type FencedWrites,
  type IncrementOp,
  type IncrementOutcome,
  type PageRecord,
} from "@livecount/store";
import { Registry } from "prom-client";
import { ForwardingBus } from "../../../test/support/forwarding_bus.js";
import { ManualClock } from "../../../test/support/manual_clock.js";
import type { ActorRegistry } from "../src/actor_registry.js";
import { CounterMetrics } from "../src/counter_metrics.js";
import type { DurableWriter } from "../src/durable_writer.js";
import type { OccupancyWatch } from "../src/occupancy.js";
import { createPageUnits } from "../src/page_units.js";
import type { PresenceIntake } from "../src/presence_intake.js";

export const DC = "dc1";
export const PARTITIONS = 8;
export const GRACE_MS = 1_000;
export const SETTLE_MS = 2_000;
export const PASSIVATE_MS = 5_000;
export const GATEWAY_LEASE_MS = 6_000;
export const COALESCE_MS = 50;
/** Anti-entropy merges at once in these tests (LIVECOUNT_AE_MERGES_IN_FLIGHT). */
export const MERGES_IN_FLIGHT = 2;
/** LIVECOUNT_FLUSH_MAX_WRITES's default. */
export const FLUSH_MAX_WRITES = 20_000;
export const SWEEP_MS = 100;
/** Two DC heartbeats of 250 ms, as a node runs with the defaults (counter_node.ts). */
export const BUS_SILENCE_MS = 500;
export const MAX_ACTORS = 200;

/** A MemoryStore whose calls can be made to fail or wait, and that logs each write's start and end. */
export class FlakyStore extends MemoryStore {
  /** The next this many write/increment/load calls reject. */
  failWrites = 0;
  /** Entries the successful writes carried, in all. */
  entriesWritten = 0;
  failIncrements = 0;
  /** The next this many increment calls apply, then reject as if their answer was lost. */
  loseIncrementAnswers = 0;
  failLoads = 0;
  /** The next this many reads of a partition's presence floor reject. */
  failFloors = 0;
  /**
   * Partitions whose part of each write and increment fails while the rest goes through, as a
   * Redis Cluster shard that is down: writes reject with PartialWriteError, their ops answer
   * "unavailable".
   */
  readonly failPartitions = new Set<number>();
  /** While set, writes wait for it before reaching the store (a round trip in flight). */
  hold: Promise<void> | undefined;
  /** While set, increments wait for it before reaching the store. */
  holdIncrements: Promise<void> | undefined;
  /** While true, loads wait in `heldLoads` until the test settles them. */
  holdLoads = false;
  readonly heldLoads: Array<{ page: string; release(): void; fail(err: Error): void }> = [];

  constructor(
    now: () => number,
    private readonly timeline: string[],
  ) {
    super({ now });
  }

  override async presenceFloor(partition: number): Promise<number> {
    if (this.failFloors > 0 && this.failFloors-- > 0) throw new StoreError("injected floor failure");
    return super.presenceFloor(partition);
  }

  override async load(page: string): Promise<PageRecord> {
    await this.#loading(page);
    return super.load(page);
  }

  override async loadExcept(page: string, prefixes: readonly string[]): Promise<PageRecord> {
    await this.#loading(page);
    return super.loadExcept(page, prefixes);
  }

  /** What every load of a page goes through: held or failed when the test says so. */
  async #loading(page: string): Promise<void> {
    if (this.holdLoads) {
      await new Promise<void>((release, fail) => this.heldLoads.push({ page, release, fail }));
    }
    if (this.failLoads > 0 && this.failLoads-- > 0) throw new StoreError("injected load failure");
  }

  override async write(groups: readonly FencedWrites[]): Promise<Fence[]> {
    this.timeline.push("write:start");
    if (this.hold !== undefined) await this.hold;
    if (this.failWrites > 0 && this.failWrites-- > 0) {
      this.timeline.push("write:failed");
      throw new StoreError("injected write failure");
    }
    const failed = groups.filter((g) => this.failPartitions.has(g.fence.partition));
    const through = groups.filter((g) => !this.failPartitions.has(g.fence.partition));
    const stale = await super.write(through);
    this.entriesWritten += through.reduce((n, g) => n + g.writes.length, 0);
    const pages = new Set(through.flatMap((g) => g.writes.map((w) => w.page)));
    this.timeline.push(`write:done:${[...pages].join(",")}`);
    if (failed.length > 0)
      throw new PartialWriteError(
        failed.map((g) => g.fence),
        stale,
      );
    return stale;
  }

  override async mergePages(
    fence: Fence,
    pages: ReadonlyMap<string, PageRecord>,
    indexedDc: string,
  ): Promise<Map<string, PageRecord> | null> {
    this.timeline.push("write:start");
    if (this.hold !== undefined) await this.hold;
    if (this.failWrites > 0 && this.failWrites-- > 0) {
      this.timeline.push("write:failed");
      throw new StoreError("injected write failure");
    }
    const advanced = await super.mergePages(fence, pages, indexedDc);
    this.timeline.push(`write:done:${[...pages.keys()].join(",")}`);
    return advanced;
  }

  override async increment(ops: readonly IncrementOp[], keyTtlMs: number): Promise<IncrementOutcome[]> {
    this.timeline.push("increment:start");
    if (this.holdIncrements !== undefined) await this.holdIncrements;
    if (this.failIncrements > 0 && this.failIncrements-- > 0) {
      this.timeline.push("increment:failed");
      throw new StoreError("injected increment failure");
    }
    const through = ops.filter((op) => !this.failPartitions.has(op.fence.partition));
    const applied = await super.increment(through, keyTtlMs);
    if (this.loseIncrementAnswers > 0 && this.loseIncrementAnswers-- > 0) {
      this.timeline.push("increment:failed");
      throw new StoreError("injected lost answer");
    }
    this.timeline.push(`increment:done:${[...new Set(through.map((o) => o.page))].join(",")}`);
    return ops.map((op) =>
      this.failPartitions.has(op.fence.partition) ? { kind: "unavailable" } : applied.shift()!,
    );
  }
}

/** The in-memory bus, with each page update recorded when it is published (not when delivered). */
class RecordingBus extends ForwardingBus {
  constructor(
    local: MemoryBus,
    private readonly onUpdate: (update: PageUpdate | PageUpdates, subject: string) => void,
  ) {
    super(local);
  }

  override publish(subject: string, data: Uint8Array): void {
    const msg = decodeMessage(data);
    if (msg.type === "update" || msg.type === "updates") this.onUpdate(msg, subject);
    this.local.publish(subject, data);
  }
}

/** A presence batch of one gateway on pages of one partition: [page, viewer, present] per op. */
export function presenceBatch(
  partition: number,
  gateway: string,
  ops: ReadonlyArray<readonly [string, string, boolean]>,
): PresenceBatch {
  return {
    type: "presence",
    gateway,
    partition,
    ops: ops.map(([page, viewer, present]) => ({ page, viewer, present })),
  };
}

/** A page id in `partition`, distinct for each `n`. */
export function pageIn(partition: number, n = 0): string {
  if (!Number.isInteger(partition) || partition < 0 || partition >= PARTITIONS)
    throw new RangeError(`partition ${partition} is not one of ${PARTITIONS}`);
  for (let i = 0, found = 0; ; i++) {
    const page = `page-${i}`;
    if (partitionOf(page, PARTITIONS) === partition && found++ === n) return page;
  }
}

export interface Units {
  readonly clock: ManualClock;
  readonly bus: Bus;
  readonly store: FlakyStore;
  /** Store calls and publishes, in the order they happened. */
  readonly timeline: string[];
  /** Every page update published, decoded. */
  readonly published: PageUpdate[];
  /** Every batch of updates (anti-entropy, this DC's gateways) published, with its subject. */
  readonly batches: Array<{ readonly subject: string; readonly updates: PageUpdates }>;
  readonly fences: Map<number, Fence>;
  readonly lost: number[];
  readonly registry: ActorRegistry;
  readonly writer: DurableWriter;
  readonly intake: PresenceIntake;
  /** The registry of the node's metrics (CounterMetrics). */
  readonly metricsRegistry: Registry;
  /**
   * Since when nothing comes on the bus (NATS down or frozen: the broker answers no round trip), as
   * the node's BusPulse would tell; undefined (the default) while it carries.
   */
  busSilentSince: number | undefined;
  /** Takes the partition's lease in the store, as the node's ownership would. */
  acquire(partition: number): Promise<Fence>;
  close(): Promise<void>;
}

/** `occupancy`: the watch of occupancy webhooks, as a node with LIVECOUNT_WEBHOOK_URL wires it. */
export async function buildUnits(
  options: {
    readonly occupancy?: OccupancyWatch;
    readonly flushMaxWrites?: number;
    /** LIVECOUNT_GRACE_MS; default GRACE_MS. */
    readonly graceMs?: number;
  } = {},
): Promise<Units> {
  const clock = new ManualClock();
  const timeline: string[] = [];
  const published: PageUpdate[] = [];
  const batches: Array<{ subject: string; updates: PageUpdates }> = [];
  const memoryBus = new MemoryBus({ clock });
  const bus = new RecordingBus(memoryBus, (msg, subject) => {
    if (msg.type === "updates") {
      for (const page of Object.keys(msg.pages)) timeline.push(`publish:${page}`);
      batches.push({ subject, updates: msg });
      return;
    }
    timeline.push(`publish:${msg.page}`);
    published.push(msg);
  });
  const store = new FlakyStore(() => clock.now(), timeline);
  const fences = new Map<number, Fence>();
  const lost: number[] = [];
  let busSilentSince: number | undefined;
  const metricsRegistry = new Registry();
  const { registry, writer, intake } = createPageUnits({
    dc: DC,
    partitions: PARTITIONS,
    graceMs: options.graceMs ?? GRACE_MS,
    settleMs: SETTLE_MS,
    passivateMs: PASSIVATE_MS,
    maxActors: MAX_ACTORS,
    coalesceMs: COALESCE_MS,
    flushMaxWrites: options.flushMaxWrites ?? FLUSH_MAX_WRITES,
    mergesInFlight: MERGES_IN_FLIGHT,
    idempotencyTtlMs: 60_000,
    // Off: retries here test the store's answers (recent_keys.test.ts tests the memory).
    idempotencyMemoryMs: 0,
    idempotencyMemoryKeys: 100_000,
    // One DC: no other hears the keys (key_replication.test.ts sends them).
    idempotencyAcrossDcs: false,
    idempotencyImportMaxKeys: 100_000,
    idempotencyResendMaxKeys: 100_000,
    dcLeaseMs: 5000,
    dcHeartbeatMs: 250,
    nodeId: "n-test",
    peerDcs: [],
    maxCountersPerPage: 256,
    gatewayLeaseMs: GATEWAY_LEASE_MS,
    sweepMs: SWEEP_MS,
    // The broker answers at once while the bus carries; while it is silent, nothing since it began.
    busHealth: {
      get heardAt() {
        return busSilentSince ?? clock.monotonic();
      },
      get unansweredSince() {
        return busSilentSince;
      },
      // While silent nothing comes; while it carries, heardAt is now anyway.
      delivered: () => {},
    },
    busSilenceMs: BUS_SILENCE_MS,
    clock,
    store,
    bus,
    logger: silentLogger,
    metrics: new CounterMetrics(metricsRegistry, {
      partitionsOwned: () => fences.size,
      partitionsBootstrapped: () => fences.size,
    }),
    fenceOf: (p) => fences.get(p),
    lost: (fence) => lost.push(fence.partition),
    ...(options.occupancy !== undefined ? { occupancy: options.occupancy } : {}),
  });
  return {
    clock,
    bus,
    store,
    timeline,
    published,
    batches,
    fences,
    lost,
    registry,
    writer,
    intake,
    metricsRegistry,
    get busSilentSince() {
      return busSilentSince;
    },
    set busSilentSince(at) {
      busSilentSince = at;
    },
    async acquire(partition) {
      const lease = await store.acquire(partition, "node-a", 3_600_000);
      if (lease === null) throw new Error(`partition ${partition} is held by another node`);
      fences.set(partition, lease);
      registry.partitionServing(partition);
      return lease;
    },
    async close() {
      writer.close();
      registry.close();
      await memoryBus.close();
    },
  };
}

/** Lets `ms` pass with the node's presence sweep running on time, as the counter node runs it. */
export async function sweepOnTime(u: Units, ms: number): Promise<void> {
  const end = u.clock.now() + ms;
  while (u.clock.now() < end) {
    await u.clock.advance(Math.min(SWEEP_MS, end - u.clock.now()));
    u.intake.sweep(u.clock.monotonic());
  }
}
