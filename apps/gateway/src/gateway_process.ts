import { HEARTBEATS_PER_LEASE, claimGatewayId, connectBus, type GatewayIdHolder } from "@livecount/cluster";
import {
  ConfigError,
  createLogger,
  readLogLevel,
  stopOnSignals,
  stopWithFailure,
  systemClock,
} from "@livecount/runtime";
import { Registry, collectDefaultMetrics } from "prom-client";
import { Gateway } from "./gateway.js";
import { GatewayStoppedError } from "./ring_wait.js";
import { readGatewayConfig } from "./gateway_config.js";
import { connectionsOverFileLimit, openFilesLimit } from "./open_files.js";

const logger = createLogger({ name: "livecount-gateway" });

try {
  logger.level = readLogLevel(process.env);
  const config = readGatewayConfig(process.env);
  if (config.natsUrl === undefined) {
    throw new ConfigError(
      "a gateway on its own needs LIVECOUNT_NATS_URL to reach counter nodes; `npm start` runs everything in one process",
    );
  }
  const overFiles = connectionsOverFileLimit(config.maxConnections, config.listenSockets, openFilesLimit());
  if (overFiles !== undefined) logger.warn(overFiles);
  if (config.publisherKeys.length === 0)
    logger.warn("LIVECOUNT_PUBLISHER_KEYS is empty: counter changes over HTTP are refused");
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const bus = await connectBus(config, logger);
  // One process per node id: a live gateway under it keeps it, and this one exits 1.
  const { dc, nodeId: node, gatewayLeaseMs: leaseMs } = config;
  await claimGatewayId(bus, systemClock, logger, { dc, node, leaseMs });
  // Up to one node heartbeat interval: counter nodes answer the first heartbeat at once.
  const ringWaitMs = config.nodeLeaseMs / HEARTBEATS_PER_LEASE;
  const stop = (): Promise<void> => gateway.stop().then(() => bus.close());
  // Replaced while frozen or cut off: the later process keeps the id; this one hands its sockets over.
  const onSuperseded = (by: GatewayIdHolder): void =>
    stopWithFailure(
      logger,
      `a later gateway process runs under this node id (incarnation ${by.incarnation}); stopping`,
      stop,
    );
  const gateway = new Gateway({ config, bus, logger, registry, ringWaitMs, onSuperseded });
  await gateway.start();
  stopOnSignals(logger, stop);
} catch (err) {
  // Superseded while it started: stopWithFailure is stopping it, and exits 1 once it has.
  if (!(err instanceof GatewayStoppedError)) {
    logger.fatal({ err }, "gateway failed to start");
    process.exit(1);
  }
}
