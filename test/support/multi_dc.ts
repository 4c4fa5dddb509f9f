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
 * started again on the same ports and the same Redis dir, so it recovers from its AOF.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ClusterProcess, TIMINGS, clusterEnv, type ProcessKind } from "./cluster.js";
import { eventually } from "./eventually.js";
import { LinkProxyPair } from "./link_proxy.js";
import { NatsServer } from "./nats_server.js";
import { freePort, freePorts, LOOPBACK } from "./ports.js";
import { RedisServer } from "./redis_server.js";

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

  /** Whether this DC's nats-server has an outbound and an inbound gateway connection with `remote`. */
  async connectedTo(remote: string): Promise<boolean> {
    if (!this.nats.running) return false;
    try {
      const res = await fetch(`http://${LOOPBACK}:${this.monitorPort}/gatewayz`);
      const z = (await res.json()) as Gatewayz;
      return z.outbound_gateways?.[remote] !== undefined && (z.inbound_gateways?.[remote]?.length ?? 0) > 0;
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

  /** Starts the servers (again: same ports, Redis from its AOF), then counter nodes, then gateways. */
  async start(): Promise<void> {
    if (!this.redis.running) await this.redis.restart();
    if (!this.nats.running) await this.nats.restart();
    await Promise.all(this.counters.map((c) => c.start()));
    await this.waitBalanced();
    await Promise.all(this.gateways.map((g) => g.start()));
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
  ) {}

  static async start(options: MultiDcOptions = {}): Promise<MultiDc> {
    const names = options.dcs ?? ["dc1", "dc2"];
    const logDir = mkdtempSync(join(tmpdir(), "livecount-multi-dc-"));
    const gatewayPorts = await freePorts(names.length);
    const monitorPorts = await freePorts(names.length);
    const link = await LinkProxyPair.start(gatewayPorts);
    const dcs: TestDc[] = [];
    try {
      for (const [i, name] of names.entries()) {
        const proxyOf = (j: number): string => `${LOOPBACK}:${link.proxies[j]!.port}`;
        const remotes = names.map((other, j) => `{ name: ${other}, url: "nats://${proxyOf(j)}" }`);
        const config = [
          `http: "${LOOPBACK}:${monitorPorts[i]}"`,
          // Others reach this DC through its proxy, so that is the address it advertises in gossip.
          `gateway { name: ${name}, listen: "${LOOPBACK}:${gatewayPorts[i]}", advertise: "${proxyOf(i)}",`,
          `  gateways: [${remotes.join(", ")}] }`,
        ].join("\n");
        const nats = await NatsServer.start({ name: `lc-${name}`, config });
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
        dcs.push(new TestDc(name, nats, redis, counters, gateways, monitorPorts[i]!));
      }
      const multi = new MultiDc(dcs, link, logDir);
      live.add(multi);
      try {
        await Promise.all(dcs.map((dc) => dc.start()));
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

  /** Whether every running DC's nats-server has gateway connections both ways with every other. */
  async gatewaysConnected(): Promise<boolean> {
    const running = this.dcs.filter((d) => d.nats.running);
    const checks = running.flatMap((d) => running.filter((o) => o !== d).map((o) => d.connectedTo(o.name)));
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
