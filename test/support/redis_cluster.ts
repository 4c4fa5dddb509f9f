/**
 * Starts a real Redis Cluster for integration tests: `masters * (1 + replicasPerMaster)` RedisServers
 * in cluster mode, each on free client and bus ports (`cluster-port`) with its own temp dir, joined by
 * `redis-cli --cluster create`. `kill(port)` crashes one node and `waitForFailover(port)` waits until
 * a replica serves its slots; with the default node timeout of 1 s that takes about 3 s.
 *
 * redis-cli comes from LIVECOUNT_REDIS_CLI, else PATH, else /usr/bin/redis-cli. Suites wrapped in
 * `describeWithRedisCluster` need it and redis-server: skipped with a warning without them, except
 * under CI where a missing binary is an error.
 */
import { execFile } from "node:child_process";
import { Redis } from "ioredis";
import { eventually } from "./eventually.js";
import { freePort, LOOPBACK as HOST } from "./ports.js";
import { describeWithBinary, findBinary } from "./binaries.js";
import { RedisServer, redisServerAvailable } from "./redis_server.js";

const FALLBACK_CLI = "/usr/bin/redis-cli";
const SLOTS = 16_384;
/** redis-cli polls the join once a second; a loaded 2-core machine needs far less than this. */
const CREATE_TIMEOUT_MS = 60_000;
const READY_TIMEOUT_MS = 30_000;
const POLL_MS = 50;
const COMMAND_TIMEOUT_MS = 2_000;
/** Tries a fresh bus port when another process took the probed one meanwhile. */
const START_ATTEMPTS = 3;
/** Log tail per node in error messages: enough for the last few cluster events. */
const LOG_TAIL_CHARS = 1_500;

export interface RedisClusterOptions {
  /** Default 3, the fewest redis-cli accepts. */
  readonly masters?: number;
  /** Default 1: one replica to promote when its master dies. */
  readonly replicasPerMaster?: number;
  /** `cluster-node-timeout`. Default 1000: a failover completes within a few seconds. */
  readonly nodeTimeoutMs?: number;
}

export interface RedisClusterNode {
  readonly host: string;
  readonly port: number;
}

export interface RedisClusterMaster extends RedisClusterNode {
  /** Inclusive slot ranges, in ascending order. */
  readonly slots: ReadonlyArray<readonly [from: number, to: number]>;
}

/** One line of CLUSTER NODES. */
interface NodeLine {
  readonly port: number;
  readonly flags: ReadonlySet<string>;
  readonly slots: Array<[number, number]>;
}

/** Path of the redis-cli binary, or undefined when none is installed. */
export function redisCliBinary(): string | undefined {
  return findBinary("redis-cli", "LIVECOUNT_REDIS_CLI", FALLBACK_CLI);
}

/** `describe` for suites that need a Redis Cluster: skipped loudly without the binaries, failed under CI. */
export function describeWithRedisCluster(name: string, fn: () => void): void {
  describeWithBinary(
    redisServerAvailable() && redisCliBinary() !== undefined,
    "redis-server and redis-cli are required (set LIVECOUNT_REDIS_SERVER and LIVECOUNT_REDIS_CLI or install them)",
    name,
    fn,
  );
}

/** Sends one command on a connection of its own that never reconnects: a dead node fails the call at once. */
async function command(port: number, ...args: [string, ...string[]]): Promise<unknown> {
  const redis = new Redis({
    host: HOST,
    port,
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    connectTimeout: COMMAND_TIMEOUT_MS,
    commandTimeout: COMMAND_TIMEOUT_MS,
  });
  redis.on("error", () => {}); // The command's rejection carries it.
  try {
    return await redis.call(...args);
  } finally {
    redis.disconnect();
  }
}

async function text(port: number, ...args: [string, ...string[]]): Promise<string> {
  const reply = await command(port, ...args);
  if (typeof reply !== "string") throw new Error(`${args.join(" ")} on ${port}: not text`);
  return reply;
}

/** A field of INFO or CLUSTER INFO. */
function field(info: string, name: string): string | undefined {
  return new RegExp(`^${name}:(.*?)\\r?$`, "m").exec(info)?.[1];
}

/** CLUSTER NODES, leaving out slots being migrated (`[slot->-id]` entries). */
function parseNodes(reply: string): NodeLine[] {
  return reply
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => {
      const [, address = "", flags = "", , , , , , ...slots] = line.trim().split(" ");
      return {
        port: Number(/:(\d+)@/.exec(address)?.[1]),
        flags: new Set(flags.split(",")),
        slots: slots
          .filter((range) => !range.startsWith("["))
          .map((range) => {
            const [from, to = from] = range.split("-").map(Number) as [number, number?];
            return [from, to];
          }),
      };
    });
}

const slotCount = (slots: ReadonlyArray<readonly [number, number]>): number =>
  slots.reduce((sum, [from, to]) => sum + to - from + 1, 0);

/** Runs redis-cli; rejects with its output, which says which step failed. */
async function redisCli(binary: string, args: string[], timeoutMs = CREATE_TIMEOUT_MS): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(binary, args, { timeout: timeoutMs }, (err, stdout, stderr) => {
      if (err === null) resolve();
      else reject(new Error(`redis-cli ${args.join(" ")} failed: ${err.message}\n${stdout}${stderr}`));
    });
  });
}

export class RedisCluster {
  /** Slot ranges a node served when `kill()` crashed it, which `waitForFailover` sees moved. */
  readonly #killedSlots = new Map<number, RedisClusterMaster["slots"]>();

  readonly #servers: RedisServer[];
  #masterCount: number;
  readonly #nodeTimeoutMs: number;

  private constructor(servers: RedisServer[], masterCount: number, nodeTimeoutMs: number) {
    this.#servers = servers;
    this.#masterCount = masterCount;
    this.#nodeTimeoutMs = nodeTimeoutMs;
  }

  /** Every node started, masters and replicas, the added ones last. */
  get servers(): readonly RedisServer[] {
    return this.#servers;
  }

  /** Starts the nodes, creates the cluster and waits until every slot is served and every replica synced. */
  static async start(options: RedisClusterOptions = {}): Promise<RedisCluster> {
    const { masters = 3, replicasPerMaster = 1, nodeTimeoutMs = 1000 } = options;
    if (!Number.isInteger(masters) || masters < 3) {
      throw new Error(`a Redis Cluster needs 3+ masters, not ${masters}`);
    }
    if (!Number.isInteger(replicasPerMaster) || replicasPerMaster < 0) {
      throw new Error(`replicasPerMaster must be a non-negative integer, not ${replicasPerMaster}`);
    }
    const cli = redisCliBinary();
    if (cli === undefined) throw new Error("redis-cli not found (set LIVECOUNT_REDIS_CLI)");
    const servers: RedisServer[] = [];
    try {
      // One at a time: parallel starts would race each other for the probed ports.
      for (let i = 0; i < masters * (1 + replicasPerMaster); i++) {
        servers.push(await RedisCluster.#startNode(nodeTimeoutMs));
      }
      const cluster = new RedisCluster(servers, masters, nodeTimeoutMs);
      // prettier-ignore
      await redisCli(cli, [
        "--cluster", "create", ...cluster.nodes.map(({ host, port }) => `${host}:${port}`),
        "--cluster-replicas", String(replicasPerMaster),
        "--cluster-yes",
      ]);
      await cluster.#waitUntil(() => cluster.#checkFormed(), READY_TIMEOUT_MS, "cluster not formed");
      return cluster;
    } catch (err) {
      await Promise.all(servers.map((server) => server.stop()));
      throw err;
    }
  }

  static async #startNode(nodeTimeoutMs: number): Promise<RedisServer> {
    for (let attempt = 1; ; attempt++) {
      // prettier-ignore
      const extraArgs = [
        "--cluster-enabled", "yes",
        "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", String(nodeTimeoutMs),
        "--cluster-port", String(await freePort()),
        // Replicas sync at once instead of after the default 5 s wait for more replicas.
        "--repl-diskless-sync-delay", "0",
        // A replica fails over however long ago it heard from its master: a loaded machine may delay pings.
        "--cluster-replica-validity-factor", "0",
      ];
      try {
        return await RedisServer.start({ extraArgs });
      } catch (err) {
        if (attempt >= START_ATTEMPTS) throw err;
      }
    }
  }

  /** Every node: what `LIVECOUNT_REDIS_CLUSTER` and ioredis' `Cluster` take as seeds. */
  get nodes(): RedisClusterNode[] {
    return this.servers.map(({ port }) => ({ host: HOST, port }));
  }

  /** Comma-separated `host:port` of every node, as `LIVECOUNT_REDIS_CLUSTER` takes them. */
  get seeds(): string {
    return this.nodes.map(({ host, port }) => `${host}:${port}`).join(",");
  }

  /** The masters serving slots, as a live node sees them now, ordered by their first slot. */
  async masters(): Promise<RedisClusterMaster[]> {
    const nodes = parseNodes(await text(this.#livePort(), "CLUSTER", "NODES"));
    return nodes
      .filter((node) => node.flags.has("master") && node.slots.length > 0)
      .map(({ port, slots }) => ({ host: HOST, port, slots: slots.sort(([a], [b]) => a - b) }))
      .sort((a, b) => a.slots[0]![0] - b.slots[0]![0]);
  }

  async masterOfSlot(slot: number): Promise<RedisClusterMaster> {
    const master = (await this.masters()).find(({ slots }) =>
      slots.some(([from, to]) => from <= slot && slot <= to),
    );
    if (master === undefined) throw new Error(`no master serves slot ${slot}`);
    return master;
  }

  async masterOfKey(key: string): Promise<RedisClusterMaster> {
    return this.masterOfSlot(Number(await command(this.#livePort(), "CLUSTER", "KEYSLOT", key)));
  }

  /** Simulates a crash of one node: SIGKILL, no shutdown work. */
  async kill(port: number): Promise<void> {
    const server = this.#server(port);
    const master = (await this.masters()).find((node) => node.port === port);
    this.#killedSlots.set(port, master?.slots ?? []);
    await server.kill();
  }

  /**
   * Resolves once every live node has marked the killed node failed, sees its slots served by live
   * masters (a promoted replica) and reports cluster_state:ok.
   */
  async waitForFailover(deadPort: number, timeoutMs = 20_000): Promise<void> {
    const slots = this.#killedSlots.get(deadPort);
    if (slots === undefined) throw new Error(`node ${deadPort} was not killed through kill()`);
    await this.#waitUntil(
      async () => {
        for (const server of this.servers.filter(({ running }) => running)) {
          const info = await text(server.port, "CLUSTER", "INFO");
          if (field(info, "cluster_state") !== "ok") {
            throw new Error(`${server.port}: cluster_state ${field(info, "cluster_state")}`);
          }
          const nodes = parseNodes(await text(server.port, "CLUSTER", "NODES"));
          if (!nodes.find(({ port }) => port === deadPort)?.flags.has("fail")) {
            throw new Error(`${server.port} has not marked ${deadPort} failed`);
          }
          for (const [from] of slots) {
            const owner = nodes.find((node) => node.slots.some(([a, b]) => a <= from && from <= b));
            if (owner === undefined || !this.#server(owner.port).running) {
              throw new Error(`${server.port} sees slot ${from} served by ${owner?.port ?? "nobody"}`);
            }
          }
        }
      },
      timeoutMs,
      `no failover of ${deadPort}`,
    );
  }

  /**
   * Starts a killed node again on its port and dir: it rejoins as a replica of the master that took
   * its slots. Resolves once the cluster is whole again, every replica synced.
   */
  async restart(port: number, timeoutMs = 30_000): Promise<void> {
    await this.#server(port).restart();
    this.#killedSlots.delete(port);
    await this.#waitUntil(() => this.#checkFormed(), timeoutMs, `node ${port} did not rejoin`);
  }

  /**
   * Scales out as an operator would: a new empty master joins (`redis-cli --cluster add-node`) with
   * `replicas` replicas of its own, then `--cluster rebalance --cluster-use-empty-masters` moves its
   * share of the slots to it, key by key (MIGRATE), while the cluster serves. Resolves with the new
   * master's port once every node sees every slot served and every replica in sync.
   */
  async addMaster(replicas = 0, timeoutMs = CREATE_TIMEOUT_MS): Promise<number> {
    const cli = redisCliBinary();
    if (cli === undefined) throw new Error("redis-cli not found (set LIVECOUNT_REDIS_CLI)");
    const seed = `${HOST}:${this.#livePort()}`;
    const join = async (args: string[]): Promise<RedisServer> => {
      const server = await RedisCluster.#startNode(this.#nodeTimeoutMs);
      this.#servers.push(server);
      await redisCli(cli, ["--cluster", "add-node", `${HOST}:${server.port}`, seed, ...args]);
      return server;
    };
    const master = await join([]);
    this.#masterCount++;
    // redis-cli adds a node only once every node agrees on the configuration, the new master included.
    await this.#waitUntil(() => this.#checkFormed(), timeoutMs, `node ${master.port} did not join`);
    const id = await text(master.port, "CLUSTER", "MYID");
    for (let i = 0; i < replicas; i++) {
      const replica = await join(["--cluster-slave", "--cluster-master-id", id]);
      await this.#waitUntil(() => this.#checkFormed(), timeoutMs, `replica ${replica.port} did not sync`);
    }
    // prettier-ignore
    await redisCli(cli, ["--cluster", "rebalance", seed, "--cluster-use-empty-masters", "--cluster-yes"], timeoutMs);
    await this.#waitUntil(() => this.#checkFormed(), timeoutMs, "slots not settled after the rebalance");
    return master.port;
  }

  /** DBSIZE of every live master, by port. */
  async keyCounts(): Promise<Map<number, number>> {
    const masters = (await this.masters()).filter(({ port }) => this.#server(port).running);
    const counts = await Promise.all(masters.map(({ port }) => command(port, "DBSIZE")));
    return new Map(masters.map(({ port }, i) => [port, Number(counts[i])]));
  }

  /** Stops every node and deletes their dirs. */
  async stop(): Promise<void> {
    await Promise.all(this.servers.map((server) => server.stop()));
  }

  /** Every node knows every other, agrees on who is master and serves all slots; every replica is synced. */
  async #checkFormed(): Promise<void> {
    const total = this.servers.length;
    for (const { port } of this.servers) {
      const info = await text(port, "CLUSTER", "INFO");
      const state = `state ${field(info, "cluster_state")}, ${field(info, "cluster_slots_ok")} slots ok`;
      if (field(info, "cluster_state") !== "ok" || field(info, "cluster_slots_ok") !== String(SLOTS)) {
        throw new Error(`${port}: ${state}`);
      }
      const nodes = parseNodes(await text(port, "CLUSTER", "NODES"));
      const masters = nodes.filter(({ flags }) => flags.has("master"));
      const replicas = nodes.filter(({ flags }) => flags.has("slave"));
      if (masters.length !== this.#masterCount || replicas.length !== total - this.#masterCount) {
        throw new Error(`${port} sees ${masters.length} masters and ${replicas.length} replicas`);
      }
      if (slotCount(masters.flatMap(({ slots }) => slots)) !== SLOTS)
        throw new Error(`${port}: slots unassigned`);
      const replication = await text(port, "INFO", "replication");
      if (field(replication, "role") === "slave" && field(replication, "master_link_status") !== "up") {
        throw new Error(`replica ${port}: master link ${field(replication, "master_link_status")}`);
      }
    }
  }

  /** `eventually`, with each node's log tail added to the error. */
  async #waitUntil(check: () => Promise<void>, timeoutMs: number, message: string): Promise<void> {
    try {
      await eventually(check, { timeoutMs, intervalMs: POLL_MS, message });
    } catch (err) {
      const logs = this.servers.map(
        ({ port, log }) => `--- redis-server ${port}:\n${log.slice(-LOG_TAIL_CHARS)}`,
      );
      throw new Error(`${err instanceof Error ? err.message : String(err)}\n${logs.join("\n")}`, {
        cause: err,
      });
    }
  }

  #server(port: number): RedisServer {
    const server = this.servers.find((node) => node.port === port);
    if (server === undefined) throw new Error(`no node on port ${port}`);
    return server;
  }

  #livePort(): number {
    const server = this.servers.find(({ running }) => running);
    if (server === undefined) throw new Error("no node of the cluster is running");
    return server.port;
  }
}
