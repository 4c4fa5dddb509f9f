import { connectBus, openStore } from "@livecount/cluster";
import { ConfigError, createLogger } from "@livecount/runtime";
import { Registry, collectDefaultMetrics } from "prom-client";
import { readCounterConfig } from "./counter_config.js";
import { CounterNode } from "./counter_node.js";
import { startOpsServer } from "./ops_server.js";

const logger = createLogger({ name: "livecount-counter", level: process.env.LIVECOUNT_LOG_LEVEL ?? "info" });

try {
  const config = readCounterConfig(process.env);
  if (config.natsUrl === undefined) {
    throw new ConfigError(
      "a counter node on its own needs LIVECOUNT_NATS_URL to reach gateways; `npm start` runs everything in one process",
    );
  }
  if (config.redisUrl === undefined)
    logger.warn("LIVECOUNT_REDIS_URL is not set: counters live in memory and are lost on exit");
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const bus = await connectBus(config, logger);
  const store = await openStore(config, logger);
  const node = new CounterNode({ config, bus, store, logger, registry });
  await node.start();
  const ops = await startOpsServer({ port: config.port, registry, isReady: () => node.ready });
  logger.info({ port: ops.port, node: config.nodeId }, "counter node serving health and metrics");
  let stopping = false;
  const shutdown = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "handing partitions over and shutting down");
    node
      .stop()
      .then(() => Promise.all([ops.close(), store.close(), bus.close()]))
      .then(
        () => process.exit(0),
        (err: unknown) => {
          logger.error({ err }, "shutdown failed");
          process.exit(1);
        },
      );
  };
  process.on("SIGTERM", () => shutdown("SIGTERM"));
  process.on("SIGINT", () => shutdown("SIGINT"));
} catch (err) {
  logger.fatal({ err }, "counter node failed to start");
  process.exit(1);
}
