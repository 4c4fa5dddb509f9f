import { ProtocolError } from "@livecount/protocol";
import { BearerKeys, bearerOf, fullBucket, takeTokens, type BucketState } from "@livecount/runtime";
import { RateLimitedError } from "./rate_limits.js";

/** A request's headers, one object per request (RequestInfo.headers). */
type RequestHeaders = Readonly<Record<string, string>>;

export interface PublisherAuthOptions {
  /** LIVECOUNT_PUBLISHER_KEYS. */
  readonly keys: readonly string[];
  /** Tokens per second one key gets, sustained (a request costs one, a batch one per item). */
  readonly ratePerS: number;
  /** Tokens one key may spend at once. */
  readonly burst: number;
  /** Epoch-ms. */
  readonly now: () => number;
}

/**
 * Publisher keys and their rate limits. A key is checked in constant time (BearerKeys). Each key
 * has a token bucket (`ratePerS` sustained, `burst` at once): a request costs one token, a batch
 * one per item, so the work a key can cause is bounded by its rate whatever the request shape.
 * Buckets exist per configured key only, so unknown keys cost no memory.
 */
export class PublisherAuth {
  readonly #o: PublisherAuthOptions;
  readonly #keys: BearerKeys;
  readonly #buckets: BucketState[];
  /** Key indexes by request (its headers object): the admission check and the route share one lookup. */
  readonly #looked = new WeakMap<RequestHeaders, number>();

  constructor(options: PublisherAuthOptions) {
    this.#o = options;
    this.#keys = new BearerKeys(options.keys);
    this.#buckets = options.keys.map(() => fullBucket(options, options.now()));
  }

  /** Whether a request's `Authorization` header carries a publisher key (no token taken). */
  recognizes(headers: RequestHeaders): boolean {
    return this.#indexOf(headers) >= 0;
  }

  /**
   * Checks a request's `Authorization` header and returns its key's index, for `charge`. Throws
   * ProtocolError("unauthorized") for a missing or unknown key.
   */
  authenticate(headers: RequestHeaders): number {
    if (bearerOf(headers.authorization) === undefined)
      throw new ProtocolError("unauthorized", "Authorization: Bearer <publisher key> is required");
    const index = this.#indexOf(headers);
    if (index < 0) throw new ProtocolError("unauthorized", "unknown publisher key");
    return index;
  }

  /** The key index of a request's header, looked up (hashed) once per request however often asked. */
  #indexOf(headers: RequestHeaders): number {
    let index = this.#looked.get(headers);
    if (index === undefined) {
      index = this.#keys.indexOf(bearerOf(headers.authorization));
      this.#looked.set(headers, index);
    }
    return index;
  }

  /** Takes `cost` tokens from key `index`'s bucket, or none and throws RateLimitedError. */
  charge(index: number, cost: number): void {
    const retryAfterS = takeTokens(this.#buckets[index]!, cost, this.#o, this.#o.now());
    if (retryAfterS === 0) return;
    const what = cost === 1 ? "too many requests" : `not enough rate left for ${cost} changes`;
    throw new RateLimitedError(retryAfterS, `${what} for this publisher key; retry in ${retryAfterS} s`);
  }

  /**
   * The rest of a batch of `items`, whose first token was taken before its body was read: `items - 1`
   * tokens, or none and RateLimitedError with the wait for all `items` (a retry takes its first
   * again). A batch of more items than the burst could ever hold is payload_too_large, not a wait.
   */
  chargeBatch(index: number, items: number): void {
    const { burst, ratePerS } = this.#o;
    if (items > burst) {
      throw new ProtocolError(
        "payload_too_large",
        `a batch of ${items} items is more than this publisher key's burst (LIVECOUNT_PUBLISHER_BURST, ${burst})`,
      );
    }
    if (items <= 1) return;
    const bucket = this.#buckets[index]!;
    if (takeTokens(bucket, items - 1, this.#o, this.#o.now()) === 0) return;
    const retryAfterS = Math.max(1, Math.ceil((items - bucket.tokens) / ratePerS));
    throw new RateLimitedError(
      retryAfterS,
      `not enough rate left for ${items} changes for this publisher key; retry in ${retryAfterS} s`,
    );
  }

  /** `authenticate` then `charge` one token. */
  authorize(headers: RequestHeaders): void {
    this.charge(this.authenticate(headers), 1);
  }
}
