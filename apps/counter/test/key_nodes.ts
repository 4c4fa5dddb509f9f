/**
 * KeyReplication instances standing for two DCs' counter nodes on one in-memory bus, each DC with
 * its own store, for key_replication.test.ts and key_replication_acks.test.ts.
 */
import { MemoryBus } from "@livecount/bus";
import { partitionOf } from "@livecount/ring";
import { silentLogger } from "@livecount/runtime";
import { MemoryStore, type KeyRestore, type Store } from "@livecount/store";
import { Registry } from "prom-client";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { CounterMetrics } from "../src/counter_metrics.js";
import { KeyReplication } from "../src/key_replication.js";

export const PARTITIONS = 16;
export const KEY_TTL_MS = 60_000;
export const PAGE = "p1";
export const PARTITION = partitionOf(PAGE, PARTITIONS);
/** A page of another partition. */
export const ELSEWHERE = Array.from({ length: 100 }, (_, i) => `q${i}`).find(
  (p) => partitionOf(p, PARTITIONS) !== PARTITION,
)!;

export const ACK_WAIT_MS = 2000;
let nodes = 0;

export interface Node {
  readonly keys: KeyReplication;
  readonly metrics: CounterMetrics;
  readonly node: string;
}

export function nodeOf(
  bus: MemoryBus,
  store: Store,
  dc: string,
  options: {
    enabled?: boolean;
    maxQueued?: number;
    mayBeHeard?: () => boolean;
    gather?: { ms: number; clock: ManualClock };
    /** The clock and the cap of what is held for DCs that may miss it. */
    clock?: ManualClock;
    maxHeld?: number;
  } = {},
): Node {
  const metrics = new CounterMetrics(new Registry(), {
    partitionsOwned: () => 1,
    partitionsBootstrapped: () => 1,
  });
  const node = `${dc}-n${++nodes}`;
  const keys = new KeyReplication({
    dc,
    node,
    bus,
    store,
    logger: silentLogger,
    metrics,
    partitions: PARTITIONS,
    keyTtlMs: KEY_TTL_MS,
    enabled: options.enabled ?? true,
    maxQueued: options.maxQueued ?? 1000,
    mayBeHeard: options.mayBeHeard ?? (() => true),
    resendCoalesceMs: 250,
    held: {
      clock: options.clock ?? new ManualClock(),
      peers: [],
      keysTaken: () => "acks",
      discovering: () => false,
      ackWaitMs: ACK_WAIT_MS,
      keepMs: () => 6000,
      ttlMs: KEY_TTL_MS,
      maxKeys: options.maxHeld ?? 1000,
    },
    ...(options.gather !== undefined ? { gather: options.gather } : {}),
  });
  keys.start();
  return { keys, metrics, node };
}

export function like(key: string, page = PAGE): KeyRestore {
  return { page, key, counter: "likes", delta: 1, payload: `{"value":1,"updatedAt":5,"key":"${key}"}` };
}

/** What `store` answers a like under `key` now: "applied", or the payload it replays. */
export async function answerOf(store: MemoryStore, key: string, page = PAGE): Promise<string> {
  const partition = partitionOf(page, PARTITIONS);
  const fence = (await store.acquire(partition, "holder", KEY_TTL_MS))!;
  const [outcome] = await store.increment(
    [{ fence, page, counter: "likes", dc: "dc2", delta: 1, key, payload: "{}" }],
    KEY_TTL_MS,
  );
  return outcome!.kind === "duplicate" ? outcome!.payload : outcome!.kind;
}

export async function outcomes(...nodes: Node[]): Promise<Record<string, number>> {
  const sums: Record<string, number> = {};
  for (const node of nodes)
    for (const v of (await node.metrics.keysAcrossDcs.get()).values)
      sums[String(v.labels.outcome)] = (sums[String(v.labels.outcome)] ?? 0) + v.value;
  return sums;
}

/** A store whose importKeys waits until `release()`, counting its calls. */
export class HeldImports extends MemoryStore {
  calls = 0;
  #gate: Promise<void> = Promise.resolve();
  #open: () => void = () => {};

  hold(): void {
    this.#gate = new Promise((resolve) => (this.#open = resolve));
  }

  open(): void {
    this.#open();
  }

  override async importKeys(keys: ReadonlyMap<number, readonly KeyRestore[]>, ttl: number): Promise<number> {
    this.calls++;
    await this.#gate;
    return super.importKeys(keys, ttl);
  }
}

export function setUp() {
  const clock = new ManualClock();
  const bus = new MemoryBus({ clock });
  const stores = {
    dc1: new MemoryStore({ now: () => clock.now() }),
    dc2: new HeldImports({ now: () => clock.now() }),
  };
  return { clock, bus, stores };
}
