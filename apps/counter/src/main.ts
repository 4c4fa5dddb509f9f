import { connectBus, openStore } from "@livecount/cluster";
import { ConfigError, createLogger, exitWithFailure, readLogLevel, stopOnSignals } from "@livecount/runtime";
import { Registry, collectDefaultMetrics } from "prom-client";
import { readCounterConfig, startWarnings } from "./counter_config.js";
import { CounterNode } from "./counter_node.js";
import { startOpsServer } from "./ops_server.js";

const logger = createLogger({ name: "livecount-counter" });

try {
  logger.level = readLogLevel(process.env);
  const config = readCounterConfig(process.env);
  if (config.natsUrl === undefined) {
    throw new ConfigError(
      "a counter node on its own needs LIVECOUNT_NATS_URL to reach gateways; `npm start` runs everything in one process",
    );
  }
  for (const warning of startWarnings(config)) logger.warn(warning);
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  // Health first: while the node waits for NATS or Redis (they may start after it), it is alive
  // and says it is not ready.
  const serving: { node?: CounterNode } = {};
  const ops = await startOpsServer({
    port: config.port,
    registry,
    isReady: () => serving.node?.ready === true,
    adminKey: config.adminKey,
    logger,
    maxConnections: config.opsMaxConnections,
  });
  logger.info({ port: ops.port, node: config.nodeId }, "counter node serving health and metrics");
  // A counter node needs nothing it publishes itself (it knows its own membership, and drops its
  // own page updates): NATS spares it the echo of every update it publishes.
  const bus = await connectBus(config, logger, { noEcho: true });
  const store = await openStore(config, logger);
  const node = new CounterNode({
    config,
    bus,
    store,
    logger,
    registry,
    // Replaced while frozen or cut off: this process has stopped serving, and exits as a failure.
    onSuperseded: () => exitWithFailure(logger, "a later process took this node id; exiting"),
  });
  serving.node = node;
  await node.start();
  // SIGTERM hands partitions over: the node leaves the ring, flushes and releases its leases.
  stopOnSignals(logger, () => node.stop().then(() => Promise.all([ops.close(), store.close(), bus.close()])));
} catch (err) {
  logger.fatal({ err }, "counter node failed to start");
  process.exit(1);
}
