/**
 * The ioredis client of a Redis store (`Redis`, or `Cluster` on Redis Cluster) and how it behaves
 * when its connections drop: timeouts, reconnects, and what becomes of the calls in flight.
 */
import { Cluster, Redis } from "ioredis";
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

export const DEFAULT_COMMAND_TIMEOUT_MS = 5_000;
const CONNECT_TIMEOUT_MS = 5_000;
/**
 * Reconnect attempts a call caught in flight by a disconnect waits through before it rejects: none.
 * It rejects when the connection drops and is never sent again: its caller may have given up on it
 * already (answered "unavailable"), and run then on a server that restarted without its last second,
 * it would record its key on the lower entry, where the owner's own entry, written back, swallows it
 * (test/redis_in_flight.test.ts). New calls while disconnected reject at once too on one Redis (no
 * offline queue): the caller decides (retry, shed, report not ready) instead of stalling its mailbox
 * behind a dead connection. A cluster's node connections keep an offline queue whatever is set
 * (ioredis's ConnectionPool): a call to a master reconnecting waits there, up to the command
 * timeout, and `#execOn` skips a master whose last pipeline failed for a second.
 */
const MAX_RETRIES_PER_REQUEST = 0;
const RECONNECT_BASE_MS = 50;
/** Backoff cap, so the store is usable again within about a second of Redis coming back. */
const RECONNECT_MAX_MS = 1_000;
/**
 * How often a cluster client re-reads which master serves which slot, beside the re-reads a MOVED
 * reply or a lost node starts: after a failover the promoted replica is found within this.
 */
export const SLOTS_REFRESH_MS = 1_000;

/** The wait before reconnect attempt `times`: doubling from RECONNECT_BASE_MS up to RECONNECT_MAX_MS. */
function reconnectDelay(times: number): number {
  return Math.min(RECONNECT_BASE_MS * 2 ** Math.min(times, 16), RECONNECT_MAX_MS);
}

/**
 * Seeds of a cluster as ioredis nodes, the credentials the first one with any gives, and whether
 * any is `rediss://` (then every node is reached over TLS).
 */
function clusterNodes(seeds: readonly string[]): {
  nodes: Array<{ host: string; port: number }>;
  auth: { username?: string; password?: string };
  tls: boolean;
} {
  let auth: { username?: string; password?: string } = {};
  let tls = false;
  const nodes = seeds.map((seed) => {
    let url: URL;
    try {
      url = new URL(seed.includes("://") ? seed : `redis://${seed}`);
    } catch (cause) {
      throw new StoreError(`redis cluster node "${seed}" is not host:port`, { cause });
    }
    if (url.protocol !== "redis:" && url.protocol !== "rediss:")
      throw new StoreError(`redis cluster node "${seed}": only redis:// and rediss:// are supported`);
    if (url.hostname === "" || url.port === "")
      throw new StoreError(`redis cluster node "${seed}" is not host:port`);
    if (url.protocol === "rediss:") tls = true;
    if (url.password !== "" && auth.password === undefined) {
      auth = {
        password: decodeURIComponent(url.password),
        ...(url.username !== "" ? { username: decodeURIComponent(url.username) } : {}),
      };
    }
    return { host: url.hostname.replace(/^\[|\]$/g, ""), port: Number(url.port) };
  });
  return { nodes, auth, tls };
}

export function createClient(options: RedisConnectionOptions): Redis | Cluster {
  const commandTimeout = options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
  const perNode = {
    connectTimeout: CONNECT_TIMEOUT_MS,
    commandTimeout,
    maxRetriesPerRequest: MAX_RETRIES_PER_REQUEST,
    // MAX_RETRIES_PER_REQUEST rejects a dropped connection's calls, which leaves none to send
    // again; this keeps it so should they ever be kept.
    autoResendUnfulfilledCommands: false,
  };
  if (options.cluster !== undefined) {
    if (options.url !== undefined) throw new StoreError("give a redis url or cluster nodes, not both");
    if (options.cluster.length === 0) throw new StoreError("a redis cluster needs at least one seed node");
    const { nodes, auth, tls } = clusterNodes(options.cluster);
    return new Cluster(nodes, {
      lazyConnect: true,
      enableOfflineQueue: false,
      slotsRefreshInterval: SLOTS_REFRESH_MS,
      clusterRetryStrategy: reconnectDelay,
      // A node's connection that drops is dialled again rather than dropped from the pool: without
      // this, a replica whose connection ended while it was promoted stayed missing from the pool
      // though the slot map named it, and its slots' pipelines went to other masters (MOVED).
      clusterNodeRetryStrategy: reconnectDelay,
      redisOptions: { ...perNode, ...auth, ...(tls ? { tls: {} } : {}) },
    });
  }
  if (options.url === undefined) throw new StoreError("give a redis url or cluster nodes");
  return new Redis(options.url, {
    lazyConnect: true,
    ...perNode,
    enableOfflineQueue: false,
    retryStrategy: reconnectDelay,
  });
}

/**
 * Whether `err` says the call never had a server's answer for want of a connection: it dropped under
 * the call (MAX_RETRIES_PER_REQUEST), or was down when the call was made (no offline queue).
 */
export function droppedConnection(err: StoreError): boolean {
  const cause = err.cause;
  if (!(cause instanceof Error)) return false;
  return (
    cause.name === "MaxRetriesPerRequestError" ||
    cause.message === "Connection is closed." ||
    cause.message.startsWith("Stream isn't writeable")
  );
}
