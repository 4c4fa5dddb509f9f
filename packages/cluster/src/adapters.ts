import { BusConnectError, MemoryBus, NatsBus, maskedServers, type Bus } from "@livecount/bus";
import type { Logger } from "@livecount/runtime";
import type { Store } from "@livecount/store";
import type { ClusterConfig } from "./cluster_config.js";
import { untilConnected } from "./until_connected.js";

/**
 * NATS when LIVECOUNT_NATS_URL is set, else the in-memory bus (one process only). `noEcho`: the
 * process is never sent what it publishes (a process with one role; never one that runs a gateway
 * and a counter node on one connection, which talk to each other through it).
 */
export async function connectBus(
  config: ClusterConfig,
  logger: Logger,
  options: { readonly noEcho?: boolean } = {},
): Promise<Bus> {
  const natsUrl = config.natsUrl;
  if (natsUrl === undefined) return new MemoryBus();
  const log = logger.child({ component: "bus" });
  const bus = await untilConnected(
    () =>
      NatsBus.connect({
        servers: natsUrl.split(",").map((s) => s.trim()),
        name: `livecount-${config.dc}-${config.nodeId}`,
        logger: log,
        noEcho: options.noEcho ?? false,
      }),
    { what: "NATS", isConnectFailure: (err) => err instanceof BusConnectError, logger: log },
  );
  logger.info({ servers: maskedServers(natsUrl) }, "bus connected to nats");
  return bus;
}

/**
 * Redis when LIVECOUNT_REDIS_URL is set, Redis Cluster when LIVECOUNT_REDIS_CLUSTER is, else the
 * in-memory store (nothing survives a restart).
 */
export async function openStore(config: ClusterConfig, logger: Logger): Promise<Store> {
  // Loaded here, not with this module: a gateway never opens a store, and ioredis is a good part of
  // its start-up time, which a restarted gateway's viewers wait through.
  const { MemoryStore, RedisStore, StoreConnectError } = await import("@livecount/store");
  if (config.redisUrl === undefined && config.redisCluster === undefined) return new MemoryStore();
  const log = logger.child({ component: "store" });
  // Until the first connection, the wait below says why it fails; then every error is worth a line.
  let connected = false;
  const store = await untilConnected(
    () =>
      RedisStore.connect({
        ...(config.redisCluster !== undefined ? { cluster: config.redisCluster } : { url: config.redisUrl }),
        partitions: config.partitions,
        waitReplicas: config.redisWaitReplicas,
        waitTimeoutMs: config.redisWaitTimeoutMs,
        onError: (err) => {
          if (connected) log.warn({ err }, "redis connection error");
        },
      }),
    {
      what: config.redisCluster !== undefined ? "Redis Cluster" : "Redis",
      isConnectFailure: (err) => err instanceof StoreConnectError,
      logger: log,
    },
  );
  connected = true;
  log.info(
    { cluster: config.redisCluster !== undefined, waitReplicas: config.redisWaitReplicas },
    config.redisCluster !== undefined ? "store connected to redis cluster" : "store connected to redis",
  );
  return store;
}
