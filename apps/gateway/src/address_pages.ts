/**
 * What one client address may make the platform remember by joining and watching pages, over all
 * its sockets: at most LIVECOUNT_MAX_PAGES_PER_IP pages at once (each holds state here and on its
 * owner), and at most LIVECOUNT_NEW_PAGE_RATE pages per second that no socket here has yet (each may
 * end up stored until it has been empty for LIVECOUNT_EMPTY_PAGE_TTL_S). Pages someone here has are
 * free. The map holds only addresses holding some page.
 */
import { ProtocolError } from "@livecount/protocol";
import { RateLimitedError, type AddressRateLimiter } from "./rate_limits.js";

export class AddressPages {
  readonly #held = new Map<string, number>();

  constructor(
    readonly maxPerAddress: number,
    readonly newPages: AddressRateLimiter,
  ) {}

  /**
   * Counts `page` for `address` and returns undefined, or, when the address may not take it on,
   * counts nothing and returns why. `isNew`: no socket here has the page yet.
   */
  take(address: string, page: string, isNew: boolean): ProtocolError | undefined {
    const held = this.#held.get(address) ?? 0;
    if (held >= this.maxPerAddress)
      return new ProtocolError("too_many_pages", `at most ${this.maxPerAddress} pages per client address`, {
        page,
      });
    if (isNew) {
      const retryAfterS = this.newPages.tryTake(address, 1);
      if (retryAfterS > 0) {
        const message = `too many new pages from this address; retry in ${retryAfterS} s`;
        return new RateLimitedError(retryAfterS, message, { page });
      }
    }
    this.#held.set(address, held + 1);
    return undefined;
  }

  /** A page `address` took on was left, unwatched or its socket closed. */
  release(address: string): void {
    const held = this.#held.get(address) ?? 0;
    if (held > 1) this.#held.set(address, held - 1);
    else this.#held.delete(address);
  }
}
