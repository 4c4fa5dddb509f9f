/**
 * Token buckets for rate limits: `ratePerS` tokens a second refill up to `burst`. The state is a
 * plain pair of numbers so it can live inside whatever it limits (a socket's user data, a map
 * entry) without an object of its own. Time comes in as an argument.
 */
export interface BucketLimits {
  /** Tokens added per second, sustained. */
  readonly ratePerS: number;
  /** Most tokens held at once: what a client may spend in one go. */
  readonly burst: number;
}

export interface BucketState {
  tokens: number;
  /** Epoch-ms of the last refill. */
  refilledAt: number;
}

/** A full bucket at `now`. */
export function fullBucket(limits: BucketLimits, now: number): BucketState {
  return { tokens: limits.burst, refilledAt: now };
}

/**
 * Takes `cost` tokens if the bucket holds them and returns 0; otherwise takes nothing and returns
 * the seconds (at least 1) until it will hold them: the Retry-After of a refused request.
 */
export function takeTokens(bucket: BucketState, cost: number, limits: BucketLimits, now: number): number {
  const { ratePerS, burst } = limits;
  bucket.tokens = Math.min(burst, bucket.tokens + (Math.max(0, now - bucket.refilledAt) / 1000) * ratePerS);
  bucket.refilledAt = now;
  if (bucket.tokens >= cost) {
    bucket.tokens -= cost;
    return 0;
  }
  return Math.max(1, Math.ceil((cost - bucket.tokens) / ratePerS));
}

/**
 * A bucket in one number, for state kept by the thousand (a socket's user data, where a second
 * field and its boxed double cost memory per socket): the moment the bucket is full again,
 * measured in tokens since the epoch (epoch-ms × ratePerS / 1000). 0, or any moment past, is a full
 * bucket. Each take moves it forward by its cost, an integer, so takes at one instant add up
 * exactly; it behaves as `BucketState` does (generic cell rate algorithm).
 */
export type BucketFullAt = number;

/** A full bucket, whenever it is read. */
export const FULL_BUCKET_AT: BucketFullAt = 0;

/**
 * Takes `cost` tokens from the bucket that is full again at `fullAt`: returns the bucket's new
 * `fullAt`, or undefined (nothing taken) when it holds fewer than `cost` tokens at `now`.
 */
export function takeTokensAt(
  fullAt: BucketFullAt,
  cost: number,
  limits: BucketLimits,
  now: number,
): BucketFullAt | undefined {
  const nowTokens = (now / 1000) * limits.ratePerS;
  const next = Math.max(fullAt, nowTokens) + cost;
  return next - nowTokens <= limits.burst ? next : undefined;
}
