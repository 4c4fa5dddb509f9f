import { pino, type Logger, type LoggerOptions } from "pino";

export type { Logger } from "pino";

/** One root logger per process; components take children with their own bindings. */
export function createLogger(options: { name: string; level?: string } & LoggerOptions): Logger {
  return pino({ level: options.level ?? "info", ...options });
}

/** A logger that drops everything, for embedding and tests that do not look at logs. */
export const silentLogger: Logger = pino({ level: "silent" });
