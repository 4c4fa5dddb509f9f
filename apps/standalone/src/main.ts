import { createLogger } from "@livecount/runtime";
import { startStandalone } from "./standalone.js";

const logger = createLogger({ name: "livecount", level: process.env.LIVECOUNT_LOG_LEVEL ?? "info" });

try {
  const app = await startStandalone({ logger, processMetrics: true });
  logger.info({ url: app.url, demo: `${app.url}/` }, "livecount is running");
  let stopping = false;
  const shutdown = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "shutting down");
    app.close().then(
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
  logger.fatal({ err }, "livecount failed to start");
  process.exit(1);
}
