import { ConfigError, readInt, readList, readOptionalString, type Env } from "@livecount/runtime";

/**
 * Occupancy webhooks (docs/protocol.md, "Webhooks"): each setting with its variable, default and
 * reason. Read only when LIVECOUNT_WEBHOOK_URL is set; without it a counter node sends nothing.
 */
export interface WebhookConfig {
  /** LIVECOUNT_WEBHOOK_URL: where events are POSTed (http or https). Absent: no webhooks. */
  readonly url: string;
  /**
   * LIVECOUNT_WEBHOOK_SECRET: the HMAC-SHA256 key of `X-Livecount-Signature`. Required with the URL,
   * at least 32 characters: HMAC is only as strong as its key up to the hash's 32 bytes (RFC 2104),
   * and a short secret can be guessed offline from a single signed body.
   */
  readonly secret: string;
  /**
   * LIVECOUNT_WEBHOOK_THRESHOLDS: ascending positive integers (`100,1000`); a page's viewers crossing
   * one sends `page.threshold`. Default none.
   */
  readonly thresholds: readonly number[];
  /**
   * LIVECOUNT_WEBHOOK_HYSTERESIS_PCT: a threshold crossed upwards is crossed back down only below
   * the threshold less this share of it (rounded up, at most threshold - 1; 0: below the threshold).
   * Default 10: a page hovering around 100 viewers sends one `up`, and `down` once it falls under 90.
   */
  readonly hysteresisPct: number;
  /** LIVECOUNT_WEBHOOK_TIMEOUT_MS: one delivery attempt is abandoned (and retried) after this. Default 5000. */
  readonly timeoutMs: number;
  /**
   * LIVECOUNT_WEBHOOK_MAX_AGE_S: an event this old is given up: when an attempt fails, or unsent when
   * its turn comes, so no request carries an older one. Default 3600: a receiver's deploy or an
   * hour's outage loses nothing; an older event describes a state long gone (the current one is a
   * `GET /v1/pages/{page}/counter` away).
   */
  readonly maxAgeMs: number;
  /**
   * LIVECOUNT_WEBHOOK_MAX_QUEUED: events one counter node keeps waiting for delivery; past it the
   * oldest one not being sent is dropped. Default 10000: about 4 MB, an hour of a busy site's
   * transitions while the receiver is down.
   */
  readonly maxQueued: number;
  /**
   * LIVECOUNT_WEBHOOK_CONCURRENCY: requests one counter node has in flight at once (each page has
   * at most one). Default 8: a receiver that comes back is not hit by one request per page at once.
   */
  readonly concurrency: number;
  /** LIVECOUNT_WEBHOOK_RETRY_MS: the first retry waits up to this (full jitter, doubling per retry). Default 1000. */
  readonly retryMs: number;
  /** LIVECOUNT_WEBHOOK_RETRY_MAX_MS: no retry waits longer than this. Default 60000: a receiver that comes back is tried within a minute. */
  readonly retryMaxMs: number;
}

/** HMAC-SHA256's output size: a shorter key weakens the signature (RFC 2104, section 3). */
export const MIN_SECRET_LENGTH = 32;

export function readWebhookConfig(env: Env): WebhookConfig | undefined {
  const url = readOptionalString(env, "LIVECOUNT_WEBHOOK_URL");
  if (url === undefined) return undefined;
  const retryMs = readInt(env, "LIVECOUNT_WEBHOOK_RETRY_MS", 1000, { min: 10 });
  return {
    url: readUrl(url),
    secret: readSecret(env),
    thresholds: readThresholds(env),
    hysteresisPct: readInt(env, "LIVECOUNT_WEBHOOK_HYSTERESIS_PCT", 10, { min: 0, max: 50 }),
    timeoutMs: readInt(env, "LIVECOUNT_WEBHOOK_TIMEOUT_MS", 5000, { min: 100, max: 60_000 }),
    maxAgeMs: readInt(env, "LIVECOUNT_WEBHOOK_MAX_AGE_S", 3600, { min: 1 }) * 1000,
    maxQueued: readInt(env, "LIVECOUNT_WEBHOOK_MAX_QUEUED", 10_000, { min: 1 }),
    concurrency: readInt(env, "LIVECOUNT_WEBHOOK_CONCURRENCY", 8, { min: 1, max: 256 }),
    retryMs,
    retryMaxMs: readInt(env, "LIVECOUNT_WEBHOOK_RETRY_MAX_MS", 60_000, { min: retryMs }),
  };
}

function readUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch (err) {
    throw new ConfigError(`LIVECOUNT_WEBHOOK_URL must be an http or https URL, got "${url}"`, { cause: err });
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw new ConfigError(`LIVECOUNT_WEBHOOK_URL must be an http or https URL, got "${url}"`);
  return parsed.href;
}

function readSecret(env: Env): string {
  const secret = readOptionalString(env, "LIVECOUNT_WEBHOOK_SECRET");
  if (secret === undefined)
    throw new ConfigError(
      "LIVECOUNT_WEBHOOK_URL is set but LIVECOUNT_WEBHOOK_SECRET is not: receivers could not tell our events from forged ones",
    );
  if (secret.length < MIN_SECRET_LENGTH)
    throw new ConfigError(
      `LIVECOUNT_WEBHOOK_SECRET must be at least ${MIN_SECRET_LENGTH} characters (e.g. \`openssl rand -hex 32\`), got ${secret.length}`,
    );
  return secret;
}

function readThresholds(env: Env): number[] {
  const thresholds: number[] = [];
  for (const item of readList(env, "LIVECOUNT_WEBHOOK_THRESHOLDS")) {
    const n = Number(item);
    if (!/^\d+$/.test(item) || !Number.isSafeInteger(n) || n < 1)
      throw new ConfigError(`LIVECOUNT_WEBHOOK_THRESHOLDS: "${item}" is not a positive integer`);
    const last = thresholds.at(-1);
    if (last !== undefined && n <= last)
      throw new ConfigError(`LIVECOUNT_WEBHOOK_THRESHOLDS must be ascending, got ${n} after ${last}`);
    thresholds.push(n);
  }
  return thresholds;
}
