/**
 * A log line that can repeat once per request or per message (a store that stalls, a peer sending
 * malformed data, a client flood) must not turn a load into a log flood: each such line costs a
 * stack trace (about 1 KB), so 10,000 failing reads a second would write 10 MB/s and starve the
 * process that should be serving. `LogThrottle` lets the first of each kind through, then at most
 * one per interval, carrying how many were left out since (`suppressed`), so the log still says
 * how often it happened.
 *
 * Kinds are the log messages of the call sites, a fixed set, so the map stays as small as the code.
 */
import type { Logger } from "pino";

/** The interval when none is given: an operator tailing the log sees a failure within seconds. */
export const LOG_REPEAT_MS = 10_000;

export class LogThrottle {
  readonly #kinds = new Map<string, { at: number; suppressed: number }>();

  constructor(
    readonly intervalMs: number = LOG_REPEAT_MS,
    readonly now: () => number = Date.now,
  ) {}

  /**
   * Whether a line of `kind` may be written now: undefined when it must be left out (and is
   * counted), otherwise how many of its kind were left out since the last one written.
   */
  admit(kind: string): number | undefined {
    const now = this.now();
    const last = this.#kinds.get(kind);
    if (last === undefined) {
      this.#kinds.set(kind, { at: now, suppressed: 0 });
      return 0;
    }
    if (now - last.at < this.intervalMs) {
      last.suppressed++;
      return undefined;
    }
    const suppressed = last.suppressed;
    last.at = now;
    last.suppressed = 0;
    return suppressed;
  }

  /** Writes `msg` at `level` with `fields` if admitted, adding `suppressed` when some were left out. */
  log(logger: Logger, level: "info" | "warn" | "error", fields: Record<string, unknown>, msg: string): void {
    const suppressed = this.admit(msg);
    if (suppressed === undefined) return;
    logger[level](suppressed > 0 ? { ...fields, suppressed } : fields, msg);
  }
}
