import { randomUUID } from "node:crypto";
import { readInt, readOptionalString, readToken, type Env } from "@livecount/runtime";

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
  /** LIVECOUNT_ANTI_ENTROPY_MS: how often owners publish again what changed lately, for safety. Default 30000. */
  readonly antiEntropyMs: number;
}

export function readClusterConfig(env: Env): ClusterConfig {
  return {
    dc: readToken(env, "LIVECOUNT_DC", "dc1"),
    nodeId: readToken(env, "LIVECOUNT_NODE_ID", `n-${randomUUID().slice(0, 8)}`),
    natsUrl: readOptionalString(env, "LIVECOUNT_NATS_URL"),
    redisUrl: readOptionalString(env, "LIVECOUNT_REDIS_URL"),
    partitions: readInt(env, "LIVECOUNT_PARTITIONS", 256, { min: 1, max: 65536 }),
    vnodes: readInt(env, "LIVECOUNT_VNODES", 64, { min: 1, max: 1024 }),
    nodeLeaseMs: readInt(env, "LIVECOUNT_NODE_LEASE_MS", 6000, { min: 500 }),
    gatewayLeaseMs: readInt(env, "LIVECOUNT_GATEWAY_LEASE_MS", 10000, { min: 500 }),
    graceMs: readInt(env, "LIVECOUNT_GRACE_MS", 3000, { min: 0, max: 60000 }),
    coalesceMs: readInt(env, "LIVECOUNT_COALESCE_MS", 50, { min: 0, max: 1000 }),
    dcLeaseMs: readInt(env, "LIVECOUNT_DC_LEASE_MS", 15000, { min: 1000 }),
    dcHeartbeatMs: readInt(env, "LIVECOUNT_DC_HEARTBEAT_MS", 250, { min: 50, max: 5000 }),
    antiEntropyMs: readInt(env, "LIVECOUNT_ANTI_ENTROPY_MS", 30000, { min: 1000 }),
  };
}

/** Heartbeats go out this many times per lease, so one or two lost beats never expire a live peer. */
export const HEARTBEATS_PER_LEASE = 3;
