import { Backoff, sleep, systemClock, type Clock, type Logger } from "@livecount/runtime";

/** The first wait between tries (at most); each failure doubles it, up to RETRY_MAX_MS. */
const RETRY_FIRST_MS = 250;
/**
 * Longest wait between tries: a server that comes up is found within 2 s. Full jitter: the processes
 * of a DC started together do not all try in the same instant.
 */
const RETRY_MAX_MS = 2000;
/** A process still waiting says so this often (the first failure at once). */
const LOG_EVERY_MS = 10_000;

/**
 * The system's time with timers that keep the process alive (systemClock's do not): while a start
 * waits, nothing else may (a gateway listens only once connected), and the process would end.
 */
const KEEP_ALIVE_CLOCK: Clock = { ...systemClock, setTimeout: (fn, ms) => setTimeout(fn, ms) };

/** A failed first connection, as the bus and the store report it (BusConnectError, StoreConnectError). */
export interface ConnectFailure {
  /** The server refused the credentials, or the address cannot be one: no later try can mend it. */
  readonly permanent: boolean;
}

export interface UntilConnectedOptions {
  /** What is waited for, named in the log lines ("NATS", "Redis"). */
  readonly what: string;
  /** Whether an error is a failed first connection; anything else fails the start at once. */
  readonly isConnectFailure: (err: unknown) => err is ConnectFailure;
  readonly logger: Logger;
  readonly clock?: Clock;
  /** For the retries' jitter. */
  readonly random?: () => number;
}

/**
 * Runs `connect` until it succeeds. A process that starts before its NATS or Redis waits for them
 * instead of exiting, so the order in which a deployment starts does not matter and a process
 * without a supervisor (infra/local) comes up once they do. It says what it waits for, and why, at
 * the first failure and every LOG_EVERY_MS after. A permanent failure (a refused credential, an
 * impossible address) or any other error (a setting the store refuses) rejects at once.
 */
export async function untilConnected<T>(
  connect: () => Promise<T>,
  options: UntilConnectedOptions,
): Promise<T> {
  const { what, isConnectFailure, logger, clock = KEEP_ALIVE_CLOCK, random = Math.random } = options;
  const since = clock.now();
  const backoff = new Backoff(RETRY_FIRST_MS, RETRY_MAX_MS, random);
  let loggedAt = -Infinity;
  for (let failures = 0; ; failures++) {
    try {
      const connected = await connect();
      if (failures > 0) logger.info({ waitedMs: clock.now() - since }, `${what} reached`);
      return connected;
    } catch (err) {
      if (!isConnectFailure(err) || err.permanent) throw err;
      const now = clock.now();
      if (now - loggedAt >= LOG_EVERY_MS) {
        loggedAt = now;
        logger.warn(
          { err, tries: failures + 1, waitedMs: now - since },
          `${what} not reachable yet; waiting for it`,
        );
      }
      await sleep(clock, backoff.next());
    }
  }
}
