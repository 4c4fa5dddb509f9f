import { createHash, timingSafeEqual } from "node:crypto";
import { ProtocolError } from "@livecount/protocol";

/** A publisher key went over its rate: retry after `retryAfterS` seconds (the Retry-After header). */
export class RateLimitedError extends ProtocolError {
  override name = "RateLimitedError";
  constructor(readonly retryAfterS: number) {
    super("rate_limited", `too many requests for this publisher key; retry in ${retryAfterS} s`);
  }
}

export interface PublisherAuthOptions {
  /** LIVECOUNT_PUBLISHER_KEYS. */
  readonly keys: readonly string[];
  /** Requests per second one key may make, sustained. */
  readonly ratePerS: number;
  /** Requests one key may make at once. */
  readonly burst: number;
  /** Epoch-ms. */
  readonly now: () => number;
}

interface Bucket {
  tokens: number;
  refilledAt: number;
}

const BEARER = /^Bearer ([\x21-\x7e]+)$/;

/**
 * Publisher keys and their rate limits. A key is checked in constant time: the presented key's
 * digest is compared with every configured key's digest, all of them, whatever matched. Each key
 * has a token bucket (`ratePerS` sustained, `burst` at once); every request costs one token,
 * whatever its size. Buckets exist per configured key only, so unknown keys cost no memory.
 */
export class PublisherAuth {
  readonly #o: PublisherAuthOptions;
  readonly #digests: Buffer[];
  readonly #buckets: Bucket[];

  constructor(options: PublisherAuthOptions) {
    this.#o = options;
    this.#digests = options.keys.map((k) => createHash("sha256").update(k).digest());
    this.#buckets = options.keys.map(() => ({ tokens: options.burst, refilledAt: options.now() }));
  }

  /**
   * Checks an `Authorization` header and takes a token from its key's bucket. Throws
   * ProtocolError("unauthorized") for a missing or unknown key, RateLimitedError past the rate.
   */
  authorize(header: string | undefined): void {
    const m = BEARER.exec(header ?? "");
    if (m === null)
      throw new ProtocolError("unauthorized", "Authorization: Bearer <publisher key> is required");
    const digest = createHash("sha256").update(m[1]!).digest();
    let index = -1;
    this.#digests.forEach((known, i) => {
      if (timingSafeEqual(digest, known)) index = i;
    });
    if (index < 0) throw new ProtocolError("unauthorized", "unknown publisher key");
    this.#take(this.#buckets[index]!);
  }

  #take(bucket: Bucket): void {
    const { ratePerS, burst, now } = this.#o;
    const at = now();
    bucket.tokens = Math.min(burst, bucket.tokens + (Math.max(0, at - bucket.refilledAt) / 1000) * ratePerS);
    bucket.refilledAt = at;
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return;
    }
    throw new RateLimitedError(Math.max(1, Math.ceil((1 - bucket.tokens) / ratePerS)));
  }
}
