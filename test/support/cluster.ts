/**
 * A real one-data-center livecount deployment for fault-tolerance tests: a nats-server and a
 * redis-server from the test helpers, counter nodes and gateways as child processes of the built
 * output (`node apps/<app>/dist/main.js`, configured by environment as in infra/local/cluster.mjs).
 * Every process can be killed, frozen, stopped and started again with the same environment, so the
 * same node id and port (cluster_process.ts).
 *
 * Each process appends its output to its own file in a temp dir (a header line per start), so the
 * logs of every incarnation survive crashes; `logs()` gives their tails for a failed test. Children
 * are killed when the cluster stops, when the test process exits, and when it gets SIGTERM.
 *
 * The global setup builds the repo first (test/support/global_setup.ts).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { onTestFinished } from "vitest";
import {
  CLUSTER_ADMIN_KEY,
  ClusterProcess,
  LOG_TAIL_LINES,
  READY_TIMEOUT_MS,
  type ProcessKind,
} from "./cluster_process.js";
import { eventually } from "./eventually.js";
import { startNatsCluster, type NatsServer } from "./nats_server.js";
import { LinkProxy } from "./link_proxy.js";
import { freePort, LOOPBACK } from "./ports.js";
import { RedisServer, type RedisServerOptions } from "./redis_server.js";

export {
  CLUSTER_ADMIN_KEY,
  ClusterProcess,
  OPERATOR_HEADERS,
  type ExitStatus,
  type ProcessKind,
} from "./cluster_process.js";

/** The publisher key every test cluster accepts. */
export const CLUSTER_PUBLISHER_KEY = "cluster-test-key-0001";
/**
 * Lease and timing settings short enough for a suite that waits them out many times, and the
 * values tests derive their deadlines from.
 */
export const TIMINGS = {
  nodeLeaseMs: 1500,
  gatewayLeaseMs: 2000,
  partitionLeaseMs: 2000,
  graceMs: 300,
  coalesceMs: 20,
  /** Derived by the counter node: a third of the gateway lease (counter_config.ts). */
  settleMs: Math.ceil(2000 / 3),
  partitions: 64,
  vnodes: 64,
} as const;

const CLUSTER_ENV: Readonly<Record<string, string>> = {
  LIVECOUNT_DC: "dc1",
  LIVECOUNT_HOST: LOOPBACK,
  LIVECOUNT_PUBLISHER_KEYS: CLUSTER_PUBLISHER_KEY,
  LIVECOUNT_ADMIN_KEY: CLUSTER_ADMIN_KEY,
  LIVECOUNT_NODE_LEASE_MS: String(TIMINGS.nodeLeaseMs),
  LIVECOUNT_GATEWAY_LEASE_MS: String(TIMINGS.gatewayLeaseMs),
  LIVECOUNT_PARTITION_LEASE_MS: String(TIMINGS.partitionLeaseMs),
  LIVECOUNT_GRACE_MS: String(TIMINGS.graceMs),
  LIVECOUNT_COALESCE_MS: String(TIMINGS.coalesceMs),
  LIVECOUNT_PARTITIONS: String(TIMINGS.partitions),
  LIVECOUNT_VNODES: String(TIMINGS.vnodes),
  // Tests drive thousands of pages from one loopback address to load the counter nodes and the
  // store; the per-address page limits have tests of their own (apps/gateway/test/address_page_limits).
  LIVECOUNT_MAX_PAGES_PER_IP: "1000000",
  LIVECOUNT_NEW_PAGE_RATE: "1000000",
  LIVECOUNT_NEW_PAGE_BURST: "1000000",
  // Warnings say what went wrong in a failed test without flooding the log; set
  // LIVECOUNT_TEST_LOG_LEVEL=info (or debug) to follow a run step by step.
  LIVECOUNT_LOG_LEVEL: process.env.LIVECOUNT_TEST_LOG_LEVEL ?? "warn",
};

/** The environment every process of data center `dc` gets (timings, keys, log level), for multi-DC helpers. */
export function clusterEnv(dc: string): Record<string, string> {
  return { ...CLUSTER_ENV, LIVECOUNT_DC: dc };
}

export interface TestClusterOptions {
  /** Counter nodes, started first. Default 2. */
  readonly counters?: number;
  /** Gateways. Default 2. */
  readonly gateways?: number;
  readonly redis?: RedisServerOptions;
  /** Every counter node reaches Redis through its own link proxy, so a test can cut one off. */
  readonly redisLinks?: boolean;
  /**
   * Every counter node reaches NATS through its own link proxy, so a test can cut one node off the
   * bus while it still reaches Redis (with one NATS server); `"all"`: every gateway too.
   */
  readonly natsLinks?: boolean | "all";
  /** Counter nodes use this Redis Cluster (LIVECOUNT_REDIS_CLUSTER) instead of the one Redis. */
  readonly redisCluster?: { readonly seeds: string };
  /** Added to every process's environment. */
  readonly env?: Readonly<Record<string, string>>;
  /**
   * NATS servers, joined in one NATS cluster by routes. Default 1. Each process is given one server's
   * URL only (the i-th counter node and the i-th gateway the (i mod n)-th server) and learns the
   * others from the cluster's gossip, as a client given one address of a cluster does.
   */
  readonly natsServers?: number;
  /** Added to every NATS server's configuration (e.g. `max_payload: 65536`). */
  readonly natsConfig?: string;
}

export class TestCluster {
  private constructor(
    /** Every NATS server; `nats` is the first. */
    readonly natsServers: readonly NatsServer[],
    readonly redis: RedisServer,
    readonly counters: readonly ClusterProcess[],
    readonly gateways: readonly ClusterProcess[],
    readonly logDir: string,
    readonly redisLinks: ReadonlyMap<ClusterProcess, LinkProxy>,
    readonly natsLinks: ReadonlyMap<ClusterProcess, LinkProxy>,
  ) {}

  /** The NATS server (the first, with `natsServers`). */
  get nats(): NatsServer {
    return this.natsServers[0]!;
  }

  /**
   * `start`, for the running test: stopped when it finishes, its processes' logs printed and kept
   * when it failed.
   */
  static async forTest(options: TestClusterOptions = {}): Promise<TestCluster> {
    const cluster = await TestCluster.start(options);
    onTestFinished(async ({ task }) => {
      const failed = task.result?.state === "fail";
      if (failed) console.error(`\n----- logs -----\n${cluster.logs()}\n`);
      await cluster.stop(failed);
    });
    return cluster;
  }

  /** Starts the servers, then the counter nodes (until they share the partitions), then the gateways. */
  static async start(options: TestClusterOptions = {}): Promise<TestCluster> {
    const logDir = mkdtempSync(join(tmpdir(), "livecount-cluster-"));
    const natsServers = await startNatsCluster(options.natsServers ?? 1, options.natsConfig);
    const redis = await RedisServer.start(options.redis).catch(async (err: unknown) => {
      await Promise.all(natsServers.map((s) => s.stop()));
      throw err;
    });
    const base: Record<string, string> = {
      PATH: process.env.PATH ?? "",
      ...CLUSTER_ENV,
      LIVECOUNT_REDIS_URL: redis.url,
      ...(options.redisCluster !== undefined
        ? { LIVECOUNT_REDIS_URL: "", LIVECOUNT_REDIS_CLUSTER: options.redisCluster.seeds }
        : {}),
      ...options.env,
    };
    const make = async (
      kind: ProcessKind,
      i: number,
      extra: Record<string, string> = {},
    ): Promise<ClusterProcess> => {
      const nodeId = `${kind}-${i + 1}`;
      const port = await freePort();
      const nats = natsServers[i % natsServers.length]!;
      const env = {
        LIVECOUNT_NATS_URL: nats.url,
        ...base,
        ...extra,
        LIVECOUNT_NODE_ID: nodeId,
        LIVECOUNT_PORT: String(port),
      };
      return new ClusterProcess(kind, nodeId, port, env, join(logDir, `${nodeId}.log`));
    };
    const counters: ClusterProcess[] = [];
    const gateways: ClusterProcess[] = [];
    const redisLinks = new Map<ClusterProcess, LinkProxy>();
    const natsLinks = new Map<ClusterProcess, LinkProxy>();
    for (let i = 0; i < (options.counters ?? 2); i++) {
      const extra: Record<string, string> = {};
      let redisLink: LinkProxy | undefined;
      let natsLink: LinkProxy | undefined;
      if (options.redisLinks === true) {
        redisLink = await LinkProxy.start({ targetPort: redis.port });
        extra.LIVECOUNT_REDIS_URL = `redis://${LOOPBACK}:${redisLink.port}`;
      }
      if (options.natsLinks === true || options.natsLinks === "all") {
        natsLink = await LinkProxy.start({ targetPort: natsServers[i % natsServers.length]!.port });
        extra.LIVECOUNT_NATS_URL = `nats://${LOOPBACK}:${natsLink.port}`;
      }
      const counter = await make("counter", i, extra);
      if (redisLink !== undefined) redisLinks.set(counter, redisLink);
      if (natsLink !== undefined) natsLinks.set(counter, natsLink);
      counters.push(counter);
    }
    for (let i = 0; i < (options.gateways ?? 2); i++) {
      let natsLink: LinkProxy | undefined;
      if (options.natsLinks === "all")
        natsLink = await LinkProxy.start({ targetPort: natsServers[i % natsServers.length]!.port });
      const extra: Record<string, string> = {};
      if (natsLink !== undefined) extra.LIVECOUNT_NATS_URL = `nats://${LOOPBACK}:${natsLink.port}`;
      const gateway = await make("gateway", i, extra);
      if (natsLink !== undefined) natsLinks.set(gateway, natsLink);
      gateways.push(gateway);
    }
    const cluster = new TestCluster(natsServers, redis, counters, gateways, logDir, redisLinks, natsLinks);
    try {
      await Promise.all(counters.map((c) => c.start()));
      await cluster.waitBalanced();
      await Promise.all(gateways.map((g) => g.start()));
    } catch (err) {
      const logs = cluster.logs();
      await cluster.stop();
      throw new Error(`cluster did not start: ${String(err)}\n${logs}`, { cause: err });
    }
    return cluster;
  }

  /** The link between `counter` and Redis (with `redisLinks`), to cut and heal. */
  redisLinkOf(counter: ClusterProcess): LinkProxy {
    const link = this.redisLinks.get(counter);
    if (link === undefined)
      throw new Error(`${counter.nodeId} reaches Redis directly; start with redisLinks`);
    return link;
  }

  /** The link between `p` and its NATS server (with `natsLinks`), to cut and heal. */
  natsLinkOf(p: ClusterProcess): LinkProxy {
    const link = this.natsLinks.get(p);
    if (link === undefined) throw new Error(`${p.nodeId} reaches NATS directly; start with natsLinks`);
    return link;
  }

  /** Gateways whose process runs (and is not frozen). */
  get liveGateways(): ClusterProcess[] {
    return this.gateways.filter((g) => g.running && !g.paused);
  }

  get liveCounters(): ClusterProcess[] {
    return this.counters.filter((c) => c.running && !c.paused);
  }

  /**
   * Waits until every live counter node is ready and owns some partitions, and together they own
   * each partition exactly once: the ring settled and every lease changed hands.
   */
  async waitBalanced(timeoutMs = READY_TIMEOUT_MS): Promise<void> {
    await eventually(
      async () => {
        const live = this.liveCounters;
        const owned = await Promise.all(
          live.map(async (c) => {
            const res = await fetch(`${c.url}/readyz`);
            if (res.status !== 200) throw new Error(`${c.nodeId} is not ready`);
            return c.metric("livecount_counter_partitions_owned");
          }),
        );
        const total = owned.reduce((a, b) => a + b, 0);
        if (total !== TIMINGS.partitions || owned.some((n) => n === 0)) {
          throw new Error(`partitions owned: ${live.map((c, i) => `${c.nodeId}=${owned[i]}`).join(" ")}`);
        }
      },
      { timeoutMs, intervalMs: 50, message: "counter nodes balanced" },
    );
  }

  /** Tails of every process's log and of the servers', for a failed test. */
  logs(lines = LOG_TAIL_LINES): string {
    const parts = [...this.counters, ...this.gateways].map(
      (p) => `===== ${p.nodeId} (${p.logPath}) =====\n${p.logTail(lines)}`,
    );
    this.natsServers.forEach((s, i) => parts.push(`===== nats-server ${i + 1} =====\n${s.log}`));
    return parts.join("\n");
  }

  /** Kills every process and stops the servers. Logs are kept when `keepLogs`. */
  async stop(keepLogs = false): Promise<void> {
    await Promise.all([...this.counters, ...this.gateways].map((p) => p.kill()));
    await Promise.all([...this.redisLinks.values(), ...this.natsLinks.values()].map((link) => link.close()));
    await Promise.all([...this.natsServers.map((s) => s.stop()), this.redis.stop()]);
    if (!keepLogs) rmSync(this.logDir, { recursive: true, force: true });
  }
}
