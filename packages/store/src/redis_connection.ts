/**
 * How the Redis store's calls reach Redis: one ioredis client (`Redis`, or `Cluster` on Redis
 * Cluster) with the store's scripts defined, each call one pipeline per server it touches (each
 * script within one slot), sent at once, whose failed command rejects it (as a StoreError). Time,
 * keys and what the scripts mean stay with the store (redis_store.ts).
 */
import calculateSlot from "cluster-key-slot";
import { Cluster, Redis, type ChainableCommander } from "ioredis";
import { partitionTag } from "./redis_keys.js";
import { SCRIPTS, type ScriptName } from "./redis_scripts.js";
import { StoreError } from "./store.js";

export interface RedisConnectionOptions {
  /** `redis://[user:password@]host:port[/db]` of one Redis. Give this or `cluster`, not both. */
  readonly url?: string;
  /**
   * Seed nodes of a Redis Cluster, each `host:port` or `redis://[user:password@]host:port` (the first
   * with credentials gives them to every node). Give this or `url`, not both.
   */
  readonly cluster?: readonly string[];
  /** A call rejects when Redis has not answered within this many ms. Default 5000. */
  readonly commandTimeoutMs?: number;
  /**
   * Writes that must survive a failover are acknowledged only once `WAIT` confirms them on this many
   * replicas (each pipeline's, so a master's replica holds everything the call wrote there). Default 0.
   */
  readonly waitReplicas?: number;
  /** How long a WAIT may take before the call rejects, unconfirmed. Default 1000. */
  readonly waitTimeoutMs?: number;
  /** Connection errors while reconnecting (calls themselves reject); for logging. */
  readonly onError?: (err: Error) => void;
}

const DEFAULT_COMMAND_TIMEOUT_MS = 5_000;
/**
 * A replica on the same LAN confirms within a millisecond or two; a second leaves room for a slow
 * one while keeping a publisher's increment (3 s request timeout, answered "unavailable" at half)
 * well inside its budget.
 */
const DEFAULT_WAIT_TIMEOUT_MS = 1_000;
const CONNECT_TIMEOUT_MS = 5_000;
/**
 * Reconnect attempts a call caught in flight by a disconnect waits through before it rejects. New
 * calls while disconnected reject at once (no offline queue): the caller decides (retry, shed,
 * report not ready) instead of stalling its mailbox behind a dead connection.
 */
const MAX_RETRIES_PER_REQUEST = 3;
const RECONNECT_BASE_MS = 50;
/** Backoff cap, so the store is usable again within about a second of Redis coming back. */
const RECONNECT_MAX_MS = 1_000;
/**
 * How often a cluster client re-reads which master serves which slot, beside the re-reads a MOVED
 * reply or a lost node starts: after a failover the promoted replica is found within this.
 */
const SLOTS_REFRESH_MS = 1_000;

/** A script argument: numbers travel as decimal strings. */
export type Arg = string | number;

/**
 * What a call queues its commands on: the pipeline for the server of a partition's slot. On one
 * Redis every partition shares one pipeline; on a cluster each master gets one (ioredis sends a
 * pipeline to one server), all sent at once: one round trip of time either way. Each call of `pipe`
 * must queue exactly one command.
 */
export type Pipe = (partition: number) => ChainableCommander;

/** Queues a script defined with `defineCommand` (as EVALSHA, or EVAL on a fresh connection). */
export function queueScript(
  pipeline: ChainableCommander,
  name: ScriptName,
  keys: readonly string[],
  args: readonly Arg[],
) {
  // defineCommand adds the script as a method at runtime, which the typings cannot know.
  const commands = pipeline as unknown as Record<ScriptName, (...a: Arg[]) => ChainableCommander>;
  commands[name](keys.length, ...keys, ...args);
}

/** Seeds of a cluster as ioredis nodes, and the credentials the first one with any gives. */
function clusterNodes(seeds: readonly string[]): {
  nodes: Array<{ host: string; port: number }>;
  auth: { username?: string; password?: string };
} {
  let auth: { username?: string; password?: string } = {};
  const nodes = seeds.map((seed) => {
    const url = new URL(seed.includes("://") ? seed : `redis://${seed}`);
    if (url.hostname === "" || url.port === "")
      throw new StoreError(`redis cluster node "${seed}" is not host:port`);
    if (url.password !== "" && auth.password === undefined) {
      auth = {
        password: decodeURIComponent(url.password),
        ...(url.username !== "" ? { username: decodeURIComponent(url.username) } : {}),
      };
    }
    return { host: url.hostname.replace(/^\[|\]$/g, ""), port: Number(url.port) };
  });
  return { nodes, auth };
}

function createClient(options: RedisConnectionOptions): Redis | Cluster {
  const commandTimeout = options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
  const perNode = {
    connectTimeout: CONNECT_TIMEOUT_MS,
    commandTimeout,
    maxRetriesPerRequest: MAX_RETRIES_PER_REQUEST,
  };
  if (options.cluster !== undefined) {
    if (options.url !== undefined) throw new StoreError("give a redis url or cluster nodes, not both");
    if (options.cluster.length === 0) throw new StoreError("a redis cluster needs at least one seed node");
    const { nodes, auth } = clusterNodes(options.cluster);
    return new Cluster(nodes, {
      lazyConnect: true,
      enableOfflineQueue: false,
      slotsRefreshInterval: SLOTS_REFRESH_MS,
      clusterRetryStrategy: (times) =>
        Math.min(RECONNECT_BASE_MS * 2 ** Math.min(times, 16), RECONNECT_MAX_MS),
      // A node's connection that drops is dialled again rather than dropped from the pool: without
      // this, a replica whose connection ended while it was promoted stayed missing from the pool
      // though the slot map named it, and its slots' pipelines went to other masters (MOVED).
      clusterNodeRetryStrategy: (times) =>
        Math.min(RECONNECT_BASE_MS * 2 ** Math.min(times, 16), RECONNECT_MAX_MS),
      redisOptions: { ...perNode, ...auth },
    });
  }
  if (options.url === undefined) throw new StoreError("give a redis url or cluster nodes");
  return new Redis(options.url, {
    lazyConnect: true,
    ...perNode,
    enableOfflineQueue: false,
    retryStrategy: (times) => Math.min(RECONNECT_BASE_MS * 2 ** Math.min(times, 16), RECONNECT_MAX_MS),
  });
}

export interface RunOptions {
  /** The call's writes must survive a failover: see `run`. */
  readonly durable?: boolean;
}

/** One client of a Redis store, with its scripts defined. */
export class RedisConnection {
  readonly client: Redis | Cluster;
  /** On a cluster: each partition's commands go in a pipeline of their own. */
  readonly clustered: boolean;
  readonly #waitReplicas: number;
  readonly #waitTimeoutMs: number;
  /**
   * Servers whose last WAIT came back short, until when a durable call to them fails at once
   * instead of holding their connection another WAIT timeout (see `run`).
   */
  readonly #unconfirmed = new Map<string, number>();
  /** Each partition's slot (on a cluster), computed once. */
  readonly #slots = new Map<number, number>();
  #closed = false;

  private constructor(client: Redis | Cluster, options: RedisConnectionOptions) {
    this.client = client;
    this.clustered = client instanceof Cluster;
    this.#waitReplicas = options.waitReplicas ?? 0;
    this.#waitTimeoutMs = options.waitTimeoutMs ?? DEFAULT_WAIT_TIMEOUT_MS;
  }

  /** Connects and waits until Redis is ready (AOF loaded, every slot served); rejects with a StoreError if it cannot. */
  static async open(options: RedisConnectionOptions): Promise<RedisConnection> {
    const { waitReplicas = 0, waitTimeoutMs = DEFAULT_WAIT_TIMEOUT_MS } = options;
    if (!Number.isInteger(waitReplicas) || waitReplicas < 0)
      throw new StoreError("waitReplicas must be an integer >= 0");
    if (!Number.isInteger(waitTimeoutMs) || waitTimeoutMs < 1)
      throw new StoreError("waitTimeoutMs must be an integer >= 1");
    const client = createClient(options);
    // With a listener ioredis reports connection errors here instead of treating them as unhandled.
    client.on("error", (err: Error) => options.onError?.(err));
    for (const [name, lua] of Object.entries(SCRIPTS)) client.defineCommand(name, { lua });
    try {
      await client.connect();
    } catch (cause) {
      client.disconnect();
      throw new StoreError("cannot connect to redis", { cause });
    }
    return new RedisConnection(client, options);
  }

  /**
   * Sends the commands `queue` puts on the pipes (one pipeline per server, all at once) and returns
   * their replies in the order they were queued; any failed command rejects the call. `durable`: the
   * call's writes must survive a failover, so each pipeline ends with a WAIT for the configured
   * replicas, and the call rejects when fewer confirm (what it wrote may still be there: every write
   * is a max-merge or keyed by an idempotency key, so the caller's retry is safe). One WAIT per
   * server and call, not per slot: a WAIT holds its connection until it returns, so WAITs that
   * cannot be met (a master without its replica) must not queue up behind each other. For the same
   * reason, after a server's WAIT came back short, durable calls to it fail at once, sending nothing,
   * until a WAIT timeout has passed; then one call tries again.
   */
  async run(operation: string, queue: (pipe: Pipe) => void, options: RunOptions = {}): Promise<unknown[]> {
    const replies = await this.runEach(operation, queue, options);
    const failed = replies.find((r): r is StoreError => r instanceof StoreError);
    if (failed !== undefined) throw failed;
    return replies;
  }

  /**
   * `run`, except that a server's failure (an error, a short WAIT) fails only the commands sent to
   * it: their replies are that StoreError, the others' replies stand. Rejects when every server failed.
   */
  async runEach(
    operation: string,
    queue: (pipe: Pipe) => void,
    { durable = false }: RunOptions = {},
  ): Promise<unknown[]> {
    this.assertOpen();
    const pipelines = new Map<string, ChainableCommander>();
    const order: string[] = [];
    queue((partition) => {
      const group = this.#serverOf(partition);
      let pipeline = pipelines.get(group);
      if (pipeline === undefined) {
        pipeline = this.client.pipeline();
        pipelines.set(group, pipeline);
      }
      order.push(group);
      return pipeline;
    });
    const waits = durable && this.#waitReplicas > 0;
    const outcomes = await Promise.all(
      [...pipelines].map(async ([group, pipeline]): Promise<[string, unknown[] | StoreError]> => {
        if (waits) {
          const until = this.#unconfirmed.get(group);
          const now = Date.now();
          if (until !== undefined && now < until) {
            return [group, this.#notConfirmed(operation, group, "its last WAIT came back short")];
          }
          // One call tries again; the others keep failing fast meanwhile.
          if (until !== undefined) this.#unconfirmed.set(group, now + this.#waitTimeoutMs);
          pipeline.wait(this.#waitReplicas, this.#waitTimeoutMs);
        }
        return [group, await this.#exec(operation, group, pipeline, waits)];
      }),
    );
    const byGroup = new Map(outcomes);
    if ([...byGroup.values()].every((r) => r instanceof StoreError)) {
      throw [...byGroup.values()][0] as StoreError;
    }
    const next = new Map<string, number>();
    return order.map((group) => {
      const replies = byGroup.get(group)!;
      if (replies instanceof StoreError) return replies;
      const i = next.get(group) ?? 0;
      next.set(group, i + 1);
      return replies[i];
    });
  }

  /** One server's pipeline: its replies, or the StoreError that failed it. */
  async #exec(
    operation: string,
    group: string,
    pipeline: ChainableCommander,
    waits: boolean,
  ): Promise<unknown[] | StoreError> {
    const replies = await pipeline.exec().catch((cause: unknown) => cause);
    if (replies === null) return new StoreError(`redis ${operation} failed: no reply`);
    if (!Array.isArray(replies)) return new StoreError(`redis ${operation} failed`, { cause: replies });
    const failed = (replies as Array<[Error | null, unknown]>).find(([err]) => err !== null);
    if (failed !== undefined) return new StoreError(`redis ${operation} failed`, { cause: failed[0] });
    const values = (replies as Array<[null, unknown]>).map(([, reply]) => reply);
    if (!waits) return values;
    const confirmed = Number(values.pop());
    if (confirmed >= this.#waitReplicas) {
      this.#unconfirmed.delete(group);
      return values;
    }
    this.#unconfirmed.set(group, Date.now() + this.#waitTimeoutMs);
    return this.#notConfirmed(
      operation,
      group,
      `${confirmed} of ${this.#waitReplicas} replicas within ${this.#waitTimeoutMs} ms`,
    );
  }

  #notConfirmed(operation: string, server: string, why: string): StoreError {
    return new StoreError(`redis ${operation} not confirmed${server === "" ? "" : ` by ${server}`}: ${why}`);
  }

  /**
   * Which pipeline a partition's commands go in: the master serving its slot on a cluster (as the
   * client last learned the slots; a stale map fails the call with MOVED and the next call uses the
   * refreshed one), the one pipeline on one Redis.
   */
  #serverOf(partition: number): string {
    if (!this.clustered) return "";
    let slot = this.#slots.get(partition);
    if (slot === undefined) this.#slots.set(partition, (slot = calculateSlot(partitionTag(partition))));
    return (this.client as Cluster).slots[slot]?.[0] ?? `slot ${slot}`;
  }

  assertOpen(): void {
    if (this.#closed) throw new StoreError("store is closed");
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.client.quit().catch(() => this.client.disconnect());
  }
}
