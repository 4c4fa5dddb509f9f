/**
 * Several data centers in one process, on one manual clock, for convergence tests that must cover
 * long spans of time (a partition of hours) without waiting: per DC an in-memory bus, an in-memory
 * store and real counter nodes. A publish on one DC's bus also reaches every DC it is linked to,
 * like NATS gateways in a super cluster (requests stay within a DC, as in production); links are
 * cut and healed per pair of DCs.
 */
import { MemoryBus, nodeSubject } from "@livecount/bus";
import { CounterNode, readCounterConfig } from "@livecount/counter";
import { decodeNodeReply, encodeMessage, type NodeReply, type NodeRequest } from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import { silentLogger } from "@livecount/runtime";
import { MemoryStore, type PageRecord } from "@livecount/store";
import { Registry } from "prom-client";
import { ForwardingBus } from "./forwarding_bus.js";
import { ManualClock } from "./manual_clock.js";

/** Settings every simulated node uses unless a test overrides them. */
export const SIM_ENV: Readonly<Record<string, string>> = {
  LIVECOUNT_PARTITIONS: "16",
  LIVECOUNT_DC_HEARTBEAT_MS: "500",
  LIVECOUNT_DC_LEASE_MS: "5000",
  LIVECOUNT_GRACE_MS: "1000",
  LIVECOUNT_COALESCE_MS: "20",
  // Far beyond the tests: convergence must come from the reconnection itself.
  LIVECOUNT_ANTI_ENTROPY_MS: "86400000",
};

/** One DC's bus as its processes see it: local subscriptions, publishes that cross live links. */
class LinkedBus extends ForwardingBus {
  constructor(
    local: MemoryBus,
    private readonly toPeers: (subject: string, data: Uint8Array) => void,
  ) {
    super(local);
  }

  override publish(subject: string, data: Uint8Array): void {
    this.local.publish(subject, data);
    this.toPeers(subject, data);
  }
}

/** Decides whether a message crossing from one DC to another is lost on the way. */
export type DropRule = (from: string, to: string, subject: string, data: Uint8Array) => boolean;
/** How long a message crossing from one DC to another takes, in ms of clock time (0: at once). */
export type DelayRule = (from: string, to: string, subject: string, data: Uint8Array) => number;

export class SimDc {
  readonly bus: LinkedBus;
  store: MemoryStore;
  node: CounterNode | undefined;
  /** The metrics of the node started last. */
  registry = new Registry();

  constructor(
    readonly name: string,
    private readonly sim: DcSimulation,
    private readonly env: Readonly<Record<string, string>>,
  ) {
    this.bus = new LinkedBus(new MemoryBus({ clock: sim.clock }), (subject, data) =>
      sim.deliver(name, subject, data),
    );
    this.store = new MemoryStore({ now: () => sim.clock.now() });
  }

  get nodeId(): string {
    return `${this.name}-counter`;
  }

  /** Starts (or restarts, under the same node id) the DC's counter node and waits until it is ready. */
  async start(): Promise<void> {
    await this.launch();
    await this.sim.until(() => this.node!.ready, `${this.name} ready`);
  }

  /** Starts (or restarts) the DC's counter node without waiting for it to be ready. */
  async launch(): Promise<void> {
    const config = readCounterConfig({
      ...SIM_ENV,
      ...this.env,
      LIVECOUNT_DC: this.name,
      LIVECOUNT_NODE_ID: this.nodeId,
    });
    this.node = new CounterNode({
      config,
      bus: this.bus,
      store: this.store,
      logger: silentLogger,
      registry: (this.registry = new Registry()),
      clock: this.sim.clock,
      alone: false,
    });
    const started = this.node.start();
    await this.sim.clock.advance(0);
    await started;
  }

  /** Loses its store (a rebuilt DC): the node restarts on an empty one. */
  async rebuild(): Promise<void> {
    await this.node?.stop();
    this.store = new MemoryStore({ now: () => this.sim.clock.now() });
    await this.start();
  }

  /** A request to the DC's counter node, answered while the clock moves. */
  async ask(request: NodeRequest): Promise<NodeReply> {
    let answer: Uint8Array | undefined;
    const pending = this.bus.local.request(nodeSubject(this.name, this.nodeId), encodeMessage(request), {
      timeoutMs: 30_000,
    });
    pending.then(
      (a) => (answer = a),
      () => {},
    );
    await this.sim.until(() => answer !== undefined, `${this.name} answers ${request.type}`);
    return decodeNodeReply(answer!);
  }

  /** Adds `delta` to a counter exactly once under `key`; throws on any error reply. */
  async increment(page: string, counter: string, delta: number, key: string): Promise<number> {
    const reply = await this.ask({ type: "increment", page, counter, delta, key });
    if (reply.type !== "incremented")
      throw new Error(`${this.name}: increment failed: ${JSON.stringify(reply)}`);
    return reply.value;
  }

  /** A viewer joins (or, with `present` false, leaves) a page through this DC's owner, as a gateway would. */
  async presence(page: string, viewer: string, present = true): Promise<void> {
    const partition = partitionOf(page, Number(SIM_ENV.LIVECOUNT_PARTITIONS));
    const reply = await this.ask({
      type: "presence",
      gateway: "gw-sim",
      partition,
      ops: [{ page, viewer, present }],
    });
    if (reply.type !== "ack") throw new Error(`${this.name}: presence failed: ${JSON.stringify(reply)}`);
  }

  /** Every DC's entries of a page as this DC's owner holds them. */
  async entries(page: string): Promise<PageRecord> {
    const reply = await this.ask({ type: "snapshot", page });
    if (reply.type !== "page_state")
      throw new Error(`${this.name}: snapshot failed: ${JSON.stringify(reply)}`);
    return reply.counters as PageRecord;
  }

  /** Whether this DC's node holds `remote` live (its `livecount_counter_dc_up` gauge). */
  async dcUp(remote: string): Promise<boolean> {
    return (await this.metric(`livecount_counter_dc_up{dc="${remote}"}`)) === 1;
  }

  /** A metric of the node, `name` or `name{label="value",...}` (labels in any order), summed; 0 when absent. */
  async metric(selector: string): Promise<number> {
    const [, name, labelText = ""] = /^([^{]+)(?:\{(.*)\})?$/.exec(selector)!;
    const wanted = [...labelText.matchAll(/(\w+)="([^"]*)"/g)].map(([, k, v]) => [k!, v!] as const);
    const metric = this.registry.getSingleMetric(name!);
    if (metric === undefined) return 0;
    const { values } = await metric.get();
    return values
      .filter((v) => wanted.every(([k, want]) => String((v.labels as Record<string, unknown>)[k]) === want))
      .reduce((sum, v) => sum + v.value, 0);
  }

  /** A counter's value summed over every DC's entry, as this DC holds it. */
  async value(page: string, counter: string): Promise<number> {
    const entries = (await this.entries(page))[counter] ?? {};
    return Object.values(entries).reduce((sum, e) => sum + e.p - e.n, 0);
  }

  async stop(): Promise<void> {
    await this.node?.stop();
    this.node = undefined;
    await this.bus.close();
  }
}

export class DcSimulation {
  readonly clock = new ManualClock(1_800_000_000_000);
  readonly #dcs = new Map<string, SimDc>();
  /** Pairs of DCs with a live link, as "a|b" with a < b. */
  readonly #links = new Set<string>();
  /** While set, messages crossing a live link that it picks are lost. */
  drop: DropRule | undefined;
  /** While set, messages crossing a live link that it picks arrive that much later. */
  delay: DelayRule | undefined;

  /** Adds a DC (not started), linked to none. */
  add(name: string, env: Readonly<Record<string, string>> = {}): SimDc {
    const dc = new SimDc(name, this, env);
    this.#dcs.set(name, dc);
    return dc;
  }

  dc(name: string): SimDc {
    const dc = this.#dcs.get(name);
    if (dc === undefined) throw new Error(`no DC ${name}`);
    return dc;
  }

  link(a: string, b: string): void {
    this.#links.add(pair(a, b));
  }

  cut(a: string, b: string): void {
    this.#links.delete(pair(a, b));
  }

  /** Publishes a message of `dc` in every DC it is linked to, unless dropped, after any delay. */
  deliver(dc: string, subject: string, data: Uint8Array): void {
    for (const [name, other] of this.#dcs) {
      if (name === dc || !this.#links.has(pair(dc, name))) continue;
      if (this.drop?.(dc, name, subject, data) === true) continue;
      const ms = this.delay?.(dc, name, subject, data) ?? 0;
      if (ms <= 0) other.bus.local.publish(subject, data);
      else this.clock.setTimeout(() => other.bus.local.publish(subject, data), ms);
    }
  }

  /** Starts DCs together and waits until every one is ready (DCs that expect each other as peers). */
  async startAll(names: readonly string[]): Promise<void> {
    for (const name of names) await this.dc(name).launch();
    await this.until(() => names.every((n) => this.dc(n).node?.ready === true), `${names.join(", ")} ready`);
  }

  /** Moves the clock 50 ms at a time until `done()` (at most `maxMs` of clock time). */
  async until(done: () => boolean, what: string, maxMs = 120_000): Promise<void> {
    for (let waited = 0; !done(); waited += 50) {
      if (waited > maxMs) throw new Error(`not within ${maxMs} ms of clock time: ${what}`);
      await this.clock.advance(waited === 0 ? 0 : 50);
    }
  }

  /** Lets `ms` of clock time pass, every timer firing on time. */
  async run(ms: number): Promise<void> {
    const step = 1_000;
    for (let left = ms; left > 0; left -= step) await this.clock.advance(Math.min(step, left));
  }

  /** Stops every node (each hands its partitions over), then closes the buses. */
  async stop(): Promise<void> {
    for (const dc of this.#dcs.values()) await dc.node?.stop();
    this.#links.clear();
    for (const dc of this.#dcs.values()) await dc.stop();
  }
}

function pair(a: string, b: string): string {
  return a < b ? `${a}|${b}` : `${b}|${a}`;
}
