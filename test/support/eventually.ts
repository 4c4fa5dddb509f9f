/**
 * Polling with a deadline, for asserting on systems that converge asynchronously: `fn` is retried
 * until it returns without throwing, and its last failure is rethrown when time runs out. The
 * interval between attempts is pacing, never an assertion.
 */
export interface EventuallyOptions {
  /** Give up after this many milliseconds. Default 5000. */
  readonly timeoutMs?: number;
  /** Wait this long between attempts. Default 20. */
  readonly intervalMs?: number;
  /** Prefixed to the error when the deadline passes. */
  readonly message?: string;
}

/** A failure no later attempt can undo (a socket the server closed): `eventually` rethrows it at once. */
export class Irrecoverable extends Error {
  override name = "Irrecoverable";
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves with `fn`'s first result that does not throw; rejects with its last error after `timeoutMs`. */
export async function eventually<T>(fn: () => T | Promise<T>, options: EventuallyOptions = {}): Promise<T> {
  const { timeoutMs = 5000, intervalMs = 20, message } = options;
  const deadline = Date.now() + timeoutMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof Irrecoverable) throw err;
      if (Date.now() >= deadline) {
        const reason = err instanceof Error ? err.message : String(err);
        const prefix = message !== undefined ? `${message}: ` : "";
        throw new Error(`${prefix}not true after ${timeoutMs} ms (${attempt} attempts): ${reason}`, {
          cause: err,
        });
      }
    }
    await sleep(intervalMs);
  }
}

/** Resolves like `promise`, or rejects when it has not settled within `timeoutMs`: a test fails fast instead of hanging. */
export async function within<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
