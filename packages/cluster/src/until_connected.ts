import { sleep, systemClock, type Clock, type Logger } from "@livecount/runtime";

/** The first wait between tries; each failure doubles it, up to RETRY_MAX_MS. */
const RETRY_FIRST_MS = 250;
/** Longest wait between tries: a server that comes up is found within 2 s. */
const RETRY_MAX_MS = 2000;
/** A process still waiting says so this often (the first failure at once). */
const LOG_EVERY_MS = 10_000;

/**
 * The system's time with timers that keep the process alive (systemClock's do not): while a start
 * waits, nothing else may (a gateway listens only once connected), and the process would end.
 */
const KEEP_ALIVE_CLOCK: Clock = { ...systemClock, setTimeout: (fn, ms) => setTimeout(fn, ms) };

/** What the bus and the store throw when the first connection fails (NatsBus, RedisConnection). */
const CONNECT_FAILED = /^cannot connect to /;
/**
 * Causes no later try can mend: the server answered and refused the credentials, or the address
 * cannot be a server's.
 */
const PERMANENT =
  /WRONGPASS|NOAUTH|invalid (username|password)|AUTHORIZATION_VIOLATION|authorization violation|AUTHENTICATION|Invalid URL/i;

/** Whether a later try may succeed: the connection failed, and not on a permanent cause. */
function worthWaiting(err: unknown): boolean {
  if (!(err instanceof Error) || !CONNECT_FAILED.test(err.message)) return false;
  for (let e: unknown = err.cause; e instanceof Error; e = e.cause) {
    if (PERMANENT.test(e.message) || PERMANENT.test(String((e as { code?: unknown }).code ?? "")))
      return false;
  }
  return true;
}

/**
 * Runs `connect` until it succeeds. A process that starts before its NATS or Redis waits for them
 * instead of exiting, so the order in which a deployment starts does not matter and a process
 * without a supervisor (infra/local) comes up once they do. It says what it waits for, and why, at
 * the first failure and every LOG_EVERY_MS after. Anything else (a setting the store refuses, a
 * refused credential, an impossible address) rejects at once: no wait can mend it.
 */
export async function untilConnected<T>(
  what: string,
  connect: () => Promise<T>,
  logger: Logger,
  clock: Clock = KEEP_ALIVE_CLOCK,
): Promise<T> {
  const since = clock.now();
  let loggedAt = -Infinity;
  for (let failures = 0; ; failures++) {
    try {
      const connected = await connect();
      if (failures > 0) logger.info({ waitedMs: clock.now() - since }, `${what} reached`);
      return connected;
    } catch (err) {
      if (!worthWaiting(err)) throw err;
      const now = clock.now();
      if (now - loggedAt >= LOG_EVERY_MS) {
        loggedAt = now;
        logger.warn(
          { err, tries: failures + 1, waitedMs: now - since },
          `${what} not reachable yet; waiting for it`,
        );
      }
      await sleep(clock, Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** failures));
    }
  }
}
