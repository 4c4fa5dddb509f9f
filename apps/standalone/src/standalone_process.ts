import { createLogger, exitWithFailure, readLogLevel, stopOnSignals } from "@livecount/runtime";
import { startStandalone } from "./standalone.js";

const logger = createLogger({ name: "livecount" });

try {
  logger.level = readLogLevel(process.env);
  const app = await startStandalone({
    logger,
    processMetrics: true,
    onSuperseded: (what) => exitWithFailure(logger, `a later process took this ${what} id; exiting`),
  });
  logger.info({ url: app.url, demo: `${app.url}/`, console: `${app.url}/admin` }, "livecount is running");
  stopOnSignals(logger, () => app.close());
} catch (err) {
  logger.fatal({ err }, "livecount failed to start");
  process.exit(1);
}
