import { pino, type Logger } from "pino";

/** A log line as pino writes it: level number, message and the fields logged with it. */
export interface LogLine {
  readonly level: number;
  readonly msg: string;
  readonly [field: string]: unknown;
}

export const WARN = 40;
export const INFO = 30;
export const ERROR = 50;

/** A real pino logger at debug whose lines are kept, parsed, for a test to read. */
export function logLines(): { logger: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const logger = pino({ level: "debug" }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { logger, lines };
}
