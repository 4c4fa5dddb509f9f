/**
 * Retry timing: full-jitter exponential backoff, shared by HTTP retries and WebSocket reconnects.
 * The server packages have the same helper in @livecount/runtime; the SDK keeps its own copy because
 * it is published on its own and must not depend on anything (it runs in browsers too).
 */

export interface RetryOptions {
  /** Tries in all, the first included; 1 turns retries off. Default 6. */
  readonly attempts: number;
  /** Cap of the first retry's delay, in milliseconds; doubles with each retry. Default 100. */
  readonly baseMs: number;
  /** Largest delay between two tries, in milliseconds (a server's Retry-After may ask for more). Default 5000. */
  readonly maxMs: number;
}

export const DEFAULT_RETRY: RetryOptions = Object.freeze({ attempts: 6, baseMs: 100, maxMs: 5000 });

/**
 * Full jitter (AWS architecture blog, "Exponential Backoff and Jitter"): the n-th retry (from 0)
 * waits random(0, min(maxMs, baseMs * 2^n)), which spreads a crowd of clients that failed
 * together instead of having them retry in lockstep.
 */
export function fullJitterMs(retry: number, baseMs: number, maxMs: number, random = Math.random): number {
  return Math.floor(random() * Math.min(maxMs, baseMs * 2 ** Math.min(retry, 30)));
}

/**
 * The delay before reopening a dropped socket: full jitter under a cap that doubles per failed try
 * from `baseMs` up to `maxMs`, and that never exceeds how long the connection has been down
 * (`downMs`, counted from the first retry after a healthy connection; at least `baseMs`).
 *
 * The second bound keeps a short outage short. A server restarted within a second sees its clients
 * back within about another second, spread over it, instead of waiting for those that drew several
 * small delays in a row and so reached a large cap early (with the doubling alone, one client in a
 * few thousand waited over 7 s after a 0.6 s outage). A long outage still backs off exponentially:
 * each try at most doubles the time spent waiting.
 */
export function reconnectDelayMs(
  failures: number,
  downMs: number,
  baseMs: number,
  maxMs: number,
  random = Math.random,
): number {
  return Math.floor(
    random() * Math.min(maxMs, baseMs * 2 ** Math.min(failures, 30), Math.max(baseMs, downMs)),
  );
}

/** Checks user-supplied retry options, filling in defaults. */
export function retryOptions(partial: Partial<RetryOptions> | undefined): RetryOptions {
  const r = { ...DEFAULT_RETRY, ...partial };
  if (!Number.isInteger(r.attempts) || r.attempts < 1)
    throw new RangeError("retry.attempts must be an integer >= 1");
  if (!(r.baseMs >= 0) || !(r.maxMs >= r.baseMs)) throw new RangeError("retry needs 0 <= baseMs <= maxMs");
  return r;
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** `Retry-After` (delay-seconds or an HTTP date) in milliseconds; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}
