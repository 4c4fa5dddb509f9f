/**
 * A real multi-data-center livecount deployment for tests: per DC a nats-server (its own cluster,
 * joined to the other DCs by NATS gateways: a super cluster), a redis-server with AOF, counter
 * nodes and gateways as child processes of the built output (`ClusterProcess` from cluster.ts).
 *
 * Every gateway connection between DCs goes through a `LinkProxy` in front of the target DC's
 * gateway port (each server advertises its proxy, so gossip never hands out a direct address): the
 * test cuts and heals the link with `cut()` / `heal()`. `gatewaysConnected()` reads each server's
 * /gatewayz (monitoring port) to tell when NATS has re-established the gateway connections after a
 * heal, since nats-server re-dials a lost gateway on its own fixed timer (about once a second).
 *
 * A whole DC can be killed (SIGKILL to every process, nats-server and redis-server included) and
 * started again on the same ports and the same Redis dir, so it recovers from its AOF, or on a wiped
 * Redis dir (`RedisServer.wipe()`), as a rebuilt DC. A DC listed in `late` is defined (ports, config,
 * processes) but not started until the test calls its `start()` or `launch()`: a DC that joins later.
 *
 * Which DCs NATS joins is the `links` topology, a full mesh by default. Each server lists only the
 * DCs it is linked to and rejects gateway connections from any other (`reject_unknown_cluster`), so
 * gossip cannot join two DCs the topology keeps apart.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, onTestFinished } from "vitest";
import { ClusterProcess, TIMINGS, clusterEnv, type ProcessKind } from "./cluster.js";
import { eventually } from "./eventually.js";
import { LinkProxyPair } from "./link_proxy.js";
import { NatsServer } from "./nats_server.js";
import { freePort, freePorts, LOOPBACK } from "./ports.js";
import { RedisServer } from "./redis_server.js";

/**
 * Starts of a DC's nats-server, each on fresh monitoring and gateway ports after another process
 * took a probed one between the probe and the bind (ports.ts cannot rule that out).
 */
const PORT_ATTEMPTS = 3;
/** nats-server's fatal lines for a listener it could not bind, with the port each names. */
const PORT_TAKEN = {
  monitor: /monitor port: listen tcp [^:]+:\d+: bind: address already in use/,
  gateway: /gateway port: \d+ - listen tcp [^:]+:\d+: bind: address already in use/,
};

/** Liveness timings for multi-DC tests: a remote DC silent for DC_TIMINGS.leaseMs is down. */
export const DC_TIMINGS = {
  leaseMs: 2000,
  heartbeatMs: 100,
  /**
   * Periodic anti-entropy far beyond any test's length: convergence after a heal must come from the
   * reconnection itself, not from the safety net.
   */
  antiEntropyMs: 600_000,
} as const;

const READY_TIMEOUT_MS = 30_000;
const LOG_TAIL_LINES = 150;

export interface MultiDcOptions {
  /** Data center ids; default ["dc1", "dc2"]. */
  readonly dcs?: readonly string[];
  /** Counter nodes per DC; default 2. */
  readonly counters?: number;
  /** Gateways per DC; default 1. */
  readonly gateways?: number;
  /** Added to every process's environment. */
  readonly env?: Readonly<Record<string, string>>;
  /** Per DC, added to its processes' environment after `env`, e.g. `{ dc2: { LIVECOUNT_PEER_DCS: "dc1" } }`. */
  readonly dcEnv?: Readonly<Record<string, Readonly<Record<string, string>>>>;
  /**
   * Pairs of DCs joined by NATS gateways; default every pair. NATS does not forward between
   * gateways, so two DCs not linked never exchange a message, even through a third.
   */
  readonly links?: readonly (readonly [string, string])[];
  /** DCs defined but not started: their servers and processes start when the test calls `start()` or `launch()`. */
  readonly late?: readonly string[];
}

/** What nats-server's /gatewayz says about one server's gateway connections. */
interface Gatewayz {
  readonly outbound_gateways?: Readonly<Record<string, unknown>>;
  readonly inbound_gateways?: Readonly<Record<string, readonly unknown[]>>;
}

/** Deployments not stopped yet: their servers are killed if the test process gets SIGTERM. */
const live = new Set<MultiDc>();
// cluster.ts and redis_server.ts kill their children on SIGTERM and die of it again; nats_server.ts
// only cleans up on exit, which a signal skips. Listeners run in order before the signal is raised
// again, so this one runs too.
process.once("SIGTERM", () => {
  for (const multi of live) {
    multi.link.cut();
    for (const dc of multi.dcs) void dc.nats.kill();
  }
});

/** One data center: its servers and processes. */
export class TestDc {
  constructor(
    readonly name: string,
    readonly nats: NatsServer,
    readonly redis: RedisServer,
    readonly counters: readonly ClusterProcess[],
    readonly gateways: readonly ClusterProcess[],
    /** nats-server's monitoring port (/gatewayz). */
    readonly monitorPort: number,
  ) {}

  get processes(): ClusterProcess[] {
    return [...this.counters, ...this.gateways];
  }

  /** The DCs this DC's nats-server has gateway connections with right now, each way (its /gatewayz). */
  async gatewayConnections(): Promise<{ outbound: string[]; inbound: string[] }> {
    const res = await fetch(`http://${LOOPBACK}:${this.monitorPort}/gatewayz`);
    const z = (await res.json()) as Gatewayz;
    const inbound = Object.entries(z.inbound_gateways ?? {}).filter(([, conns]) => conns.length > 0);
    return { outbound: Object.keys(z.outbound_gateways ?? {}), inbound: inbound.map(([name]) => name) };
  }

  /** Whether this DC's nats-server has an outbound and an inbound gateway connection with `remote`. */
  async connectedTo(remote: string): Promise<boolean> {
    if (!this.nats.running) return false;
    try {
      const { outbound, inbound } = await this.gatewayConnections();
      return outbound.includes(remote) && inbound.includes(remote);
    } catch {
      return false;
    }
  }

  /** Waits until every counter node is ready and together they own each partition exactly once. */
  async waitBalanced(timeoutMs = READY_TIMEOUT_MS): Promise<void> {
    await eventually(
      async () => {
        const owned = await Promise.all(
          this.counters.map(async (c) => {
            const res = await fetch(`${c.url}/readyz`);
            if (res.status !== 200) throw new Error(`${c.nodeId} is not ready`);
            return c.metric("livecount_counter_partitions_owned");
          }),
        );
        const total = owned.reduce((a, b) => a + b, 0);
        if (total !== TIMINGS.partitions || owned.some((n) => n === 0))
          throw new Error(
            `partitions owned: ${this.counters.map((c, i) => `${c.nodeId}=${owned[i]}`).join(" ")}`,
          );
      },
      { timeoutMs, intervalMs: 50, message: `${this.name}: counter nodes balanced` },
    );
  }

  /** Other DCs' idempotency keys this DC's counter nodes stored (KeyReplication), summed. */
  async keysStored(): Promise<number> {
    const metric = "livecount_counter_idempotency_keys_across_dcs_total";
    const each = await Promise.all(this.counters.map((c) => c.metric(metric, 'outcome="stored"')));
    return each.reduce((a, b) => a + b, 0);
  }

  /** Waits until every counter node of this DC has heard `remote`'s heartbeats (it is up for them). */
  async waitHeard(remote: string, timeoutMs = READY_TIMEOUT_MS): Promise<void> {
    await this.#waitUp(remote, 1, timeoutMs);
  }

  /** Waits until every counter node of this DC has found `remote` down (silent past its lease). */
  async waitDown(remote: string, timeoutMs = READY_TIMEOUT_MS): Promise<void> {
    await this.#waitUp(remote, 0, timeoutMs);
  }

  async #waitUp(remote: string, up: 0 | 1, timeoutMs: number): Promise<void> {
    await eventually(
      async () => {
        for (const c of this.counters)
          expect(await c.metric("livecount_counter_dc_up", `dc="${remote}"`), c.nodeId).toBe(up);
      },
      { timeoutMs, intervalMs: 50, message: `${this.name} finds ${remote} ${up === 1 ? "up" : "down"}` },
    );
  }

  /** Starts the servers (again: same ports, Redis from its AOF), then counter nodes, then gateways. */
  async start(): Promise<void> {
    await this.#startServers();
    await Promise.all(this.counters.map((c) => c.start()));
    await this.waitBalanced();
    await Promise.all(this.gateways.map((g) => g.start()));
  }

  /**
   * Starts the servers and every process without waiting for the counter nodes to be ready, for a
   * DC whose nodes may not serve yet (bootstrapping while no peer is reachable); its gateways are
   * ready as soon as they see a counter node, and answer for the others meanwhile.
   */
  async launch(): Promise<void> {
    await this.#startServers();
    for (const c of this.counters) c.spawn();
    await Promise.all(this.gateways.map((g) => g.start()));
  }

  async #startServers(): Promise<void> {
    if (!this.redis.running) await this.redis.restart();
    if (!this.nats.running) await this.nats.restart();
  }

  /** The whole DC crashes: SIGKILL to every process and to its nats-server and redis-server. */
  async kill(): Promise<void> {
    await Promise.all([...this.processes.map((p) => p.kill()), this.nats.kill(), this.redis.kill()]);
  }

  logs(lines = LOG_TAIL_LINES): string {
    const parts = this.processes.map((p) => `===== ${p.nodeId} (${p.logPath}) =====\n${p.logTail(lines)}`);
    parts.push(`===== ${this.name} nats-server =====\n${this.nats.log}`);
    return parts.join("\n");
  }

  async stop(): Promise<void> {
    await Promise.all(this.processes.map((p) => p.kill()));
    await Promise.all([this.nats.stop(), this.redis.stop()]);
  }
}

/**
 * Data centers joined by NATS gateways through a cuttable link. Start one per test file: it takes a
 * few seconds, and tests use distinct pages.
 */
export class MultiDc {
  private constructor(
    readonly dcs: readonly TestDc[],
    readonly link: LinkProxyPair,
    readonly logDir: string,
    /** The NATS gateway links, as unordered pairs. */
    readonly links: readonly (readonly [string, string])[],
  ) {}

  static async start(options: MultiDcOptions = {}): Promise<MultiDc> {
    const names = options.dcs ?? ["dc1", "dc2"];
    const links = options.links ?? names.flatMap((a, i) => names.slice(i + 1).map((b) => [a, b] as const));
    for (const name of [...links.flat(), ...(options.late ?? [])])
      if (!names.includes(name)) throw new Error(`no data center ${name}`);
    const linkedTo = (name: string): string[] =>
      links.flatMap(([a, b]) => (a === name ? [b] : b === name ? [a] : []));
    const logDir = mkdtempSync(join(tmpdir(), "livecount-multi-dc-"));
    const gatewayPorts = await freePorts(names.length);
    const monitorPorts = await freePorts(names.length);
    const link = await LinkProxyPair.start(gatewayPorts);
    const dcs: TestDc[] = [];
    try {
      for (const [i, name] of names.entries()) {
        const proxyOf = (j: number): string => `${LOOPBACK}:${link.proxies[j]!.port}`;
        const remotes = linkedTo(name).map(
          (other) => `{ name: ${other}, url: "nats://${proxyOf(names.indexOf(other))}" }`,
        );
        const config = (index: number): string =>
          [
            `http: "${LOOPBACK}:${monitorPorts[index]}"`,
            // Others reach this DC through its proxy, so that is the address it advertises in gossip.
            `gateway { name: ${name}, listen: "${LOOPBACK}:${gatewayPorts[index]}", advertise: "${proxyOf(index)}",`,
            `  reject_unknown_cluster: true, gateways: [${remotes.join(", ")}] }`,
          ].join("\n");
        // The monitoring and gateway ports were probed before the servers started: another process
        // may have bound one meanwhile, and then a fresh one is probed (the link proxy in front of
        // the gateway port follows it).
        let nats: NatsServer | undefined;
        for (let attempt = 1; nats === undefined; attempt++) {
          try {
            nats = await NatsServer.start({ name: `lc-${name}`, config: config(i) });
          } catch (err) {
            const taken = {
              monitor: PORT_TAKEN.monitor.test(String(err)),
              gateway: PORT_TAKEN.gateway.test(String(err)),
            };
            if (attempt >= PORT_ATTEMPTS || !(taken.monitor || taken.gateway)) throw err;
            if (taken.monitor) monitorPorts[i] = await freePort();
            if (taken.gateway) {
              gatewayPorts[i] = await freePort();
              link.proxies[i]!.retarget(gatewayPorts[i]!);
            }
          }
        }
        const redis = await RedisServer.start({ appendonly: true, appendfsync: "everysec" }).catch(
          async (err: unknown) => {
            await nats.stop();
            throw err;
          },
        );
        const base: Record<string, string> = {
          PATH: process.env.PATH ?? "",
          ...clusterEnv(name),
          LIVECOUNT_DC_LEASE_MS: String(DC_TIMINGS.leaseMs),
          LIVECOUNT_DC_HEARTBEAT_MS: String(DC_TIMINGS.heartbeatMs),
          LIVECOUNT_ANTI_ENTROPY_MS: String(DC_TIMINGS.antiEntropyMs),
          LIVECOUNT_NATS_URL: nats.url,
          LIVECOUNT_REDIS_URL: redis.url,
          ...options.env,
          ...options.dcEnv?.[name],
        };
        const make = async (kind: ProcessKind, n: number): Promise<ClusterProcess> => {
          const nodeId = `${name}-${kind}-${n + 1}`;
          const port = await freePort();
          const env = { ...base, LIVECOUNT_NODE_ID: nodeId, LIVECOUNT_PORT: String(port) };
          return new ClusterProcess(kind, nodeId, port, env, join(logDir, `${nodeId}.log`));
        };
        const counters: ClusterProcess[] = [];
        const gateways: ClusterProcess[] = [];
        for (let n = 0; n < (options.counters ?? 2); n++) counters.push(await make("counter", n));
        for (let n = 0; n < (options.gateways ?? 1); n++) gateways.push(await make("gateway", n));
        const dc = new TestDc(name, nats, redis, counters, gateways, monitorPorts[i]!);
        dcs.push(dc);
        // Started for their ports and config, stopped before anything could talk to them.
        if (options.late?.includes(name) === true) await dc.kill();
      }
      const multi = new MultiDc(dcs, link, logDir, links);
      live.add(multi);
      try {
        await Promise.all(dcs.filter((dc) => dc.nats.running).map((dc) => dc.start()));
        await multi.waitLinked();
      } catch (err) {
        const logs = multi.logs();
        await multi.stop();
        throw new Error(`data centers did not start: ${String(err)}\n${logs}`, { cause: err });
      }
      return multi;
    } catch (err) {
      await Promise.all(dcs.map((dc) => dc.stop().catch(() => {})));
      await link.close();
      rmSync(logDir, { recursive: true, force: true });
      throw err;
    }
  }

  dc(name: string): TestDc {
    const dc = this.dcs.find((d) => d.name === name);
    if (dc === undefined) throw new Error(`no data center ${name}`);
    return dc;
  }

  /** Cuts the link between the DCs: every gateway connection is reset, new ones too. */
  cut(): void {
    this.link.cut();
  }

  heal(): void {
    this.link.heal();
  }

  /**
   * Heals one direction of the link: traffic into `dc` flows again (the other DCs' outbound gateway
   * connections to it), traffic out of it stays cut. NATS gateways are one connection per
   * direction, so a real link can come back this way for a while.
   */
  healInto(dc: string): void {
    const index = this.dcs.findIndex((d) => d.name === dc);
    if (index < 0) throw new Error(`no data center ${dc}`);
    this.link.healInto(index);
  }

  /** Whether the topology joins the two DCs by a NATS gateway link. */
  linked(a: string, b: string): boolean {
    return this.links.some(([x, y]) => (x === a && y === b) || (x === b && y === a));
  }

  /** Whether every running DC's nats-server has gateway connections both ways with every DC it is linked to. */
  async gatewaysConnected(): Promise<boolean> {
    const running = this.dcs.filter((d) => d.nats.running);
    const checks = running.flatMap((d) =>
      running.filter((o) => o !== d && this.linked(d.name, o.name)).map((o) => d.connectedTo(o.name)),
    );
    return (await Promise.all(checks)).every(Boolean);
  }

  /** Waits until the gateway connections are up (after start, a heal or a restart). */
  async waitLinked(timeoutMs = READY_TIMEOUT_MS): Promise<void> {
    await eventually(
      async () => {
        if (!(await this.gatewaysConnected())) throw new Error("gateway connections are not all up");
      },
      { timeoutMs, intervalMs: 20, message: "NATS gateways connected" },
    );
  }

  logs(lines = LOG_TAIL_LINES): string {
    return this.dcs.map((dc) => dc.logs(lines)).join("\n");
  }

  /** Kills every process, stops the servers and the link. Logs are kept when `keepLogs`. */
  async stop(keepLogs = false): Promise<void> {
    live.delete(this);
    await Promise.all(this.dcs.map((dc) => dc.stop()));
    await this.link.close();
    if (!keepLogs) rmSync(this.logDir, { recursive: true, force: true });
  }
}

/**
 * Starts data centers for the current test: stopped when it ends, and when it fails every process's
 * log is printed and kept.
 */
export async function startDataCenters(options: MultiDcOptions = {}): Promise<MultiDc> {
  const multi = await MultiDc.start(options);
  onTestFinished(async ({ task }) => {
    const failed = task.result?.state === "fail";
    if (failed)
      console.error(`\n----- logs of every process (kept in ${multi.logDir}) -----\n${multi.logs()}\n`);
    await multi.stop(failed);
  });
  return multi;
}
