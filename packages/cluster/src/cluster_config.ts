import { randomUUID } from "node:crypto";
import { ConfigError, readInt, readList, readOptionalString, readToken, type Env } from "@livecount/runtime";

/** Settings every process of a data center must agree on, read once at startup. */
export interface ClusterConfig {
  /** LIVECOUNT_DC: this data center's id, the replica id of its PN-counter entries. Default "dc1". */
  readonly dc: string;
  /** LIVECOUNT_NODE_ID: this process's id, stable across restarts. Default: a random id. */
  readonly nodeId: string;
  /** LIVECOUNT_NATS_URL: NATS servers (comma separated). Absent: the in-memory bus. */
  readonly natsUrl: string | undefined;
  /** LIVECOUNT_REDIS_URL: Redis for this data center. Absent: the in-memory store. */
  readonly redisUrl: string | undefined;
  /**
   * LIVECOUNT_REDIS_CLUSTER: seed nodes (`host:port`, comma separated) of a Redis Cluster for this
   * data center, instead of one Redis (LIVECOUNT_REDIS_URL: set one or the other).
   */
  readonly redisCluster: readonly string[] | undefined;
  /**
   * LIVECOUNT_REDIS_WAIT_REPLICAS: a publisher change or lease acquisition is acknowledged (and
   * published) only once Redis `WAIT` confirms it on this many replicas, so it survives a master's
   * failover. Default 0: Redis's asynchronous replication, where a failover may lose the last writes.
   */
  readonly redisWaitReplicas: number;
  /** LIVECOUNT_REDIS_WAIT_TIMEOUT_MS: how long such a change waits for its replicas before it fails (retryably). Default 1000. */
  readonly redisWaitTimeoutMs: number;
  /** LIVECOUNT_PARTITIONS: fixed number of partitions pages hash into. Same in every process. Default 256. */
  readonly partitions: number;
  /** LIVECOUNT_VNODES: points per counter node on the ring. Same in every process. Default 64. */
  readonly vnodes: number;
  /** LIVECOUNT_NODE_LEASE_MS: a counter node not heard for this long leaves the ring. Default 6000. */
  readonly nodeLeaseMs: number;
  /** LIVECOUNT_GATEWAY_LEASE_MS: a gateway not heard for this long stops counting its viewers. Default 10000. */
  readonly gatewayLeaseMs: number;
  /** LIVECOUNT_GRACE_MS: how long a viewer who left keeps counting, so a reload causes no dip. Default 3000. */
  readonly graceMs: number;
  /** LIVECOUNT_COALESCE_MS: at most one count update per page per window. Default 50. */
  readonly coalesceMs: number;
  /** LIVECOUNT_DC_LEASE_MS: a remote data center not heard for this long is down: its viewers leave the totals. Default 15000. */
  readonly dcLeaseMs: number;
  /** LIVECOUNT_DC_HEARTBEAT_MS: how often counter nodes announce their data center; bounds how fast a healed link is noticed. Default 250. */
  readonly dcHeartbeatMs: number;
  /**
   * LIVECOUNT_ANTI_ENTROPY_MS: how often counter nodes compare digests of what they hold with every
   * live DC, beside the comparisons on first contact, after a gap and on takeover. Default 10000: a
   * summary is a few KB, and an update lost without any sign is repaired within this.
   */
  readonly antiEntropyMs: number;
  /**
   * LIVECOUNT_PEER_DCS: the other data centers of the deployment (comma separated). A partition
   * whose store was never bootstrapped (a new or rebuilt DC) waits for one of them that holds it to
   * learn its state before it serves, or, in a deployment whose DCs are all new, for every one of
   * them to be up. A list shared by every DC may name this one: it is left out. Default none: a DC
   * that hears no peer within a few heartbeats of starting bootstraps as the first one.
   */
  readonly peerDcs: readonly string[];
  /**
   * LIVECOUNT_REQUEST_TIMEOUT_MS: how long a request to a page's owner may take. Counter nodes answer
   * "unavailable" (retryable, 503) within half of it rather than let a caller time out. Default 3000.
   */
  readonly requestTimeoutMs: number;
  /**
   * LIVECOUNT_ADMIN_KEY: the bearer key for operators' endpoints (`/metrics` on every process,
   * prefix listings). 16..256 printable ASCII. Absent: those endpoints answer 401 to everyone.
   */
  readonly adminKey: string | undefined;
}

const ADMIN_KEY = /^[\x21-\x7e]{16,256}$/;

function readAdminKey(env: Env): string | undefined {
  const key = readOptionalString(env, "LIVECOUNT_ADMIN_KEY");
  if (key !== undefined && !ADMIN_KEY.test(key))
    throw new ConfigError("LIVECOUNT_ADMIN_KEY must be 16..256 printable ASCII characters");
  return key;
}

export function readClusterConfig(env: Env): ClusterConfig {
  const dc = readToken(env, "LIVECOUNT_DC", "dc1");
  return {
    dc,
    nodeId: readToken(env, "LIVECOUNT_NODE_ID", `n-${randomUUID().slice(0, 8)}`),
    natsUrl: readOptionalString(env, "LIVECOUNT_NATS_URL"),
    ...readRedis(env),
    partitions: readInt(env, "LIVECOUNT_PARTITIONS", 256, { min: 1, max: 65536 }),
    vnodes: readInt(env, "LIVECOUNT_VNODES", 64, { min: 1, max: 1024 }),
    nodeLeaseMs: readInt(env, "LIVECOUNT_NODE_LEASE_MS", 6000, { min: 500 }),
    gatewayLeaseMs: readInt(env, "LIVECOUNT_GATEWAY_LEASE_MS", 10000, { min: 500 }),
    graceMs: readInt(env, "LIVECOUNT_GRACE_MS", 3000, { min: 0, max: 60000 }),
    coalesceMs: readInt(env, "LIVECOUNT_COALESCE_MS", 50, { min: 0, max: 1000 }),
    dcLeaseMs: readInt(env, "LIVECOUNT_DC_LEASE_MS", 15000, { min: 1000 }),
    dcHeartbeatMs: readInt(env, "LIVECOUNT_DC_HEARTBEAT_MS", 250, { min: 50, max: 5000 }),
    antiEntropyMs: readInt(env, "LIVECOUNT_ANTI_ENTROPY_MS", 10000, { min: 1000 }),
    peerDcs: readPeerDcs(env).filter((peer) => peer !== dc),
    requestTimeoutMs: readInt(env, "LIVECOUNT_REQUEST_TIMEOUT_MS", 3000, { min: 100 }),
    adminKey: readAdminKey(env),
  };
}

/** `host:port`, or a redis:// URL with credentials. */
const REDIS_NODE = /^(?:rediss?:\/\/[^\s/]+|[^\s:/,]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}$/;
/** More replicas than this per master is not a deployment WAIT should hold every write for. */
const MAX_WAIT_REPLICAS = 16;

function readRedis(
  env: Env,
): Pick<ClusterConfig, "redisUrl" | "redisCluster" | "redisWaitReplicas" | "redisWaitTimeoutMs"> {
  const redisUrl = readOptionalString(env, "LIVECOUNT_REDIS_URL");
  const seeds = readList(env, "LIVECOUNT_REDIS_CLUSTER");
  if (redisUrl !== undefined && seeds.length > 0)
    throw new ConfigError(
      "set LIVECOUNT_REDIS_URL (one Redis) or LIVECOUNT_REDIS_CLUSTER (a Redis Cluster), not both",
    );
  for (const seed of seeds) {
    const port = Number(/:(\d+)$/.exec(seed)?.[1] ?? 0);
    if (!REDIS_NODE.test(seed) || port < 1 || port > 65535)
      throw new ConfigError(`LIVECOUNT_REDIS_CLUSTER: "${seed}" is not host:port`);
  }
  const redisWaitReplicas = readInt(env, "LIVECOUNT_REDIS_WAIT_REPLICAS", 0, {
    min: 0,
    max: MAX_WAIT_REPLICAS,
  });
  if (redisWaitReplicas > 0 && redisUrl === undefined && seeds.length === 0)
    throw new ConfigError(
      "LIVECOUNT_REDIS_WAIT_REPLICAS needs LIVECOUNT_REDIS_URL or LIVECOUNT_REDIS_CLUSTER",
    );
  return {
    redisUrl,
    redisCluster: seeds.length > 0 ? seeds : undefined,
    redisWaitReplicas,
    // Below the store's 5 s command timeout: a WAIT the client gave up on still holds its connection.
    redisWaitTimeoutMs: readInt(env, "LIVECOUNT_REDIS_WAIT_TIMEOUT_MS", 1000, { min: 1, max: 4000 }),
  };
}

/** Heartbeats go out this many times per lease, so one or two lost beats never expire a live peer. */
export const HEARTBEATS_PER_LEASE = 3;

const DC_ID = /^[A-Za-z0-9_-]{1,64}$/;

function readPeerDcs(env: Env): string[] {
  const peers = readList(env, "LIVECOUNT_PEER_DCS");
  for (const peer of peers)
    if (!DC_ID.test(peer)) throw new ConfigError(`LIVECOUNT_PEER_DCS: "${peer}" is not a data center id`);
  return peers;
}
