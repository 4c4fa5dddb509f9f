import { ProtocolError, type ErrorCode } from "@livecount/protocol";
import { fullBucket, takeTokens, type BucketLimits, type BucketState } from "@livecount/runtime";
import { LRUCache } from "lru-cache";

/** A refusal the client may try again after `retryAfterS` seconds (the Retry-After header). */
export class RetryLaterError extends ProtocolError {
  override name = "RetryLaterError";
  constructor(
    code: ErrorCode,
    readonly retryAfterS: number,
    message: string,
    options?: { readonly page?: string },
  ) {
    super(code, message, options);
  }
}

/** A client went over a rate limit: retry after `retryAfterS` seconds. */
export class RateLimitedError extends RetryLaterError {
  override name = "RateLimitedError";
  constructor(retryAfterS: number, message: string, options?: { readonly page?: string }) {
    super("rate_limited", retryAfterS, message, options);
  }
}

export interface AddressRateLimitOptions extends BucketLimits {
  /**
   * Most addresses with a bucket at once. Past it the least recently seen address loses its bucket
   * (it starts full again next time), so rotating addresses cannot grow memory: at ~150 bytes an
   * entry, 10,000 addresses are 1.5 MB.
   */
  readonly maxAddresses: number;
  /** Epoch-ms. */
  readonly now: () => number;
  /** What is limited, for the error message ("reads"). */
  readonly what: string;
}

/** A token bucket per client address, in a bounded LRU map. */
export class AddressRateLimiter {
  readonly #o: AddressRateLimitOptions;
  readonly #buckets: LRUCache<string, BucketState>;

  constructor(options: AddressRateLimitOptions) {
    this.#o = options;
    this.#buckets = new LRUCache({ max: options.maxAddresses });
  }

  /** Takes `cost` tokens from `address`'s bucket; throws RateLimitedError when it holds fewer. */
  take(address: string, cost: number): void {
    const retryAfterS = this.tryTake(address, cost);
    if (retryAfterS > 0)
      throw new RateLimitedError(
        retryAfterS,
        `too many ${this.#o.what} from this address; retry in ${retryAfterS} s`,
      );
  }

  /**
   * Takes `cost` tokens from `address`'s bucket and returns 0, or, when it holds fewer, takes
   * nothing and returns the seconds until it will hold them.
   */
  tryTake(address: string, cost: number): number {
    const now = this.#o.now();
    let bucket = this.#buckets.get(address);
    if (bucket === undefined) this.#buckets.set(address, (bucket = fullBucket(this.#o, now)));
    return takeTokens(bucket, cost, this.#o, now);
  }

  /** Addresses holding a bucket (for tests and diagnostics). */
  get size(): number {
    return this.#buckets.size;
  }
}
