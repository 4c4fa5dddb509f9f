import { pino, type Logger, type LoggerOptions } from "pino";
import { readChoice, type Env } from "./config.js";

export type { Logger } from "pino";

/**
 * One root logger per process, writing JSON lines to stdout; components take children with their
 * own bindings. The destination writes each line as it comes (asynchronously), and with a minimum
 * length above zero its `flush(callback)` waits for what is queued (`flushLogs`).
 */
export function createLogger(options: { name: string; level?: string } & LoggerOptions): Logger {
  return pino(
    { level: options.level ?? "info", ...options },
    pino.destination({ dest: 1, sync: false, minLength: 1 }),
  );
}

/** The levels LIVECOUNT_LOG_LEVEL takes: pino's, and silent. */
export const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;

/**
 * LIVECOUNT_LOG_LEVEL (default info). A process creates its logger at info and sets this level
 * first thing in its start-up, so an unknown level fails the start like any other setting.
 */
export function readLogLevel(env: Env): (typeof LOG_LEVELS)[number] {
  return readChoice(env, "LIVECOUNT_LOG_LEVEL", "info", LOG_LEVELS);
}

/** A logger that drops everything, for embedding and tests that do not look at logs. */
export const silentLogger: Logger = pino({ level: "silent" });

/**
 * Waits until the log lines written so far have left the process, or `timeoutMs`. On exit pino
 * writes what is left synchronously and retries a failed write until it succeeds: forever when the
 * log reader is gone (EPIPE) and the failure had not been reported yet. Waiting here lets it be
 * reported (pino then stops writing); past the timeout what is left is dropped instead.
 */
export function flushLogs(logger: Logger, timeoutMs: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      const stream = (logger as unknown as Record<symbol, { flushSync?: () => void }>)[
        pino.symbols.streamSym
      ];
      if (stream !== undefined) stream.flushSync = () => {};
      resolve();
    }, timeoutMs);
    logger.flush(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}
