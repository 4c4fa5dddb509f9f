import { connectBus } from "@livecount/cluster";
import { ConfigError, createLogger } from "@livecount/runtime";
import { Registry, collectDefaultMetrics } from "prom-client";
import { Gateway } from "./gateway.js";
import { readGatewayConfig } from "./gateway_config.js";

const logger = createLogger({ name: "livecount-gateway", level: process.env.LIVECOUNT_LOG_LEVEL ?? "info" });

try {
  const config = readGatewayConfig(process.env);
  if (config.natsUrl === undefined) {
    throw new ConfigError(
      "a gateway on its own needs LIVECOUNT_NATS_URL to reach counter nodes; `npm start` runs everything in one process",
    );
  }
  if (config.publisherKeys.length === 0)
    logger.warn("LIVECOUNT_PUBLISHER_KEYS is empty: counter changes over HTTP are refused");
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const bus = await connectBus(config, logger);
  const gateway = new Gateway({ config, bus, logger, registry });
  await gateway.start();
  let stopping = false;
  const shutdown = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "shutting down");
    gateway
      .stop()
      .then(() => bus.close())
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
  logger.fatal({ err }, "gateway failed to start");
  process.exit(1);
}
