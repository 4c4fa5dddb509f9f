import type { Logger } from "pino";
import { flushLogs } from "./logger.js";

/**
 * Runs `stop` once on the first SIGTERM or SIGINT, then exits: 0 when it finished (or 1 if the
 * process failed meanwhile: `exitWithFailure`), 1 when it failed. A second signal while stopping
 * is ignored (a supervisor's SIGKILL still works).
 */
export function stopOnSignals(logger: Logger, stop: () => Promise<unknown>): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "shutting down");
    stop().then(
      () => flushLogs(logger, LOG_FLUSH_MS).then(() => process.exit()),
      (err: unknown) => {
        logger.error({ err }, "shutdown failed");
        void flushLogs(logger, LOG_FLUSH_MS).then(() => process.exit(1));
      },
    );
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
}

/**
 * The process cannot go on (its counter node was superseded by a later process under its id): logs
 * why, and exits 1 once the line has left, also when a signal's stop is under way.
 */
export function exitWithFailure(logger: Logger, message: string): void {
  process.exitCode = 1;
  logger.fatal(message);
  void flushLogs(logger, LOG_FLUSH_MS).then(() => process.exit());
}

/**
 * As `exitWithFailure`, once `stop` has run (a gateway superseded under its id hands its sockets
 * over first). A signal meanwhile that runs the same stop (`stopOnSignals`) exits 1 as well.
 */
export function stopWithFailure(logger: Logger, message: string, stop: () => Promise<unknown>): void {
  process.exitCode = 1;
  logger.error(message);
  void stop()
    .catch((err: unknown) => logger.error({ err }, "stop failed"))
    .then(() => flushLogs(logger, LOG_FLUSH_MS))
    .then(() => process.exit());
}

/** How long an exit waits for its last log lines to leave (a log reader that stopped reading). */
const LOG_FLUSH_MS = 2000;
