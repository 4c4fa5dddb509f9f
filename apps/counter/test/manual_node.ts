/**
 * One counter node on the in-memory bus and store with a manual clock, for tests that drive it
 * through minutes, hours or days of time: requests go over the bus as a gateway's would.
 */
import { MemoryBus, nodeSubject } from "@livecount/bus";
import { decodeNodeReply, encodeMessage, type NodeReply, type NodeRequest } from "@livecount/protocol";
import { silentLogger, type Env } from "@livecount/runtime";
import { MemoryStore, type Store } from "@livecount/store";
import { Registry } from "prom-client";
import { expect } from "vitest";
import { ManualClock } from "../../../test/support/manual_clock.js";
import { readCounterConfig } from "../src/counter_config.js";
import { CounterNode } from "../src/counter_node.js";

/** How far a request's time may run ahead of the real time it took (five default flush windows). */
const AHEAD_MS = 250;

export class ManualNode {
  private constructor(
    readonly clock: ManualClock,
    readonly bus: MemoryBus,
    readonly store: Store,
    readonly node: CounterNode,
    readonly registry: Registry,
  ) {}

  /**
   * Starts `counter-1` in dc1 at `startMs` with `env` on top of its id, and waits until it is ready.
   * `storeOn`: its store on the node's clock (default a MemoryStore).
   */
  static async start(
    startMs: number,
    env: Env = {},
    storeOn: (now: () => number) => Store | Promise<Store> = (now) => new MemoryStore({ now }),
  ): Promise<ManualNode> {
    const clock = new ManualClock(startMs);
    const bus = new MemoryBus({ clock });
    const store = await storeOn(() => clock.now());
    const registry = new Registry();
    const config = readCounterConfig({ LIVECOUNT_NODE_ID: "counter-1", ...env });
    const node = new CounterNode({
      config,
      bus,
      store,
      logger: silentLogger,
      registry,
      clock,
    });
    const started = node.start();
    await clock.advance(0);
    await started;
    await clock.advance(100);
    // A store over a socket answers in real time: a millisecond at a time until it has, within
    // 5 s of the node's time.
    const deadline = clock.now() + 5_000;
    await advanceUntil(clock, () => node.ready || clock.now() >= deadline);
    expect(node.ready).toBe(true);
    return new ManualNode(clock, bus, store, node, registry);
  }

  /** A request to the node, time moving a millisecond at a time until it is answered (advanceUntil). */
  async ask(request: NodeRequest): Promise<NodeReply> {
    let answer: Uint8Array | undefined;
    let failed: { err: unknown } | undefined;
    const reply = this.bus.request(nodeSubject("dc1", "counter-1"), encodeMessage(request), {
      timeoutMs: 60_000,
    });
    reply.then(
      (r) => (answer = r),
      (err: unknown) => (failed = { err }),
    );
    await advanceUntil(this.clock, () => answer !== undefined || failed !== undefined);
    if (failed !== undefined) throw failed.err;
    return decodeNodeReply(answer!);
  }

  /** Moves the clock to `at` (epoch-ms), running every timer on the way. */
  async to(at: number): Promise<void> {
    await this.clock.advance(at - this.clock.now());
  }

  async stop(): Promise<void> {
    await this.node.stop();
    await this.bus.close();
  }
}

/**
 * Moves `clock` a millisecond at a time until `done`. A store over a socket answers in real time:
 * the clock runs ahead of the real time this took by at most AHEAD_MS, and otherwise waits for it,
 * so a slow answer on a loaded machine cannot run a lease out in the node's time.
 */
async function advanceUntil(clock: ManualClock, done: () => boolean): Promise<void> {
  const [from, realFrom] = [clock.now(), performance.now()];
  while (!done()) {
    if (clock.now() - from < performance.now() - realFrom + AHEAD_MS) await clock.advance(1);
    else await new Promise((resolve) => setTimeout(resolve, 1));
  }
}
