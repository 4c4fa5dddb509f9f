/**
 * What one client address may make the platform remember by joining and watching pages, over all
 * its sockets: at most LIVECOUNT_MAX_PAGES_PER_IP pages at once (each holds state here and on its
 * owner), and at most LIVECOUNT_NEW_PAGE_RATE pages per second that no socket here has yet (each may
 * end up stored until it has been empty for LIVECOUNT_EMPTY_PAGE_TTL_S). Pages someone here has are
 * free. The map holds only addresses holding some page. And at most LIVECOUNT_NEW_VISITOR_RATE viewer
 * ids per second that count as unique visitors (each may raise a register stored per page and day).
 */
import { ProtocolError } from "@livecount/protocol";
import type { EdgeConfig } from "./edge_config.js";
import { AddressRateLimiter, RateLimitedError } from "./rate_limits.js";

export class AddressPages {
  readonly #held = new Map<string, number>();

  constructor(
    readonly maxPerAddress: number,
    readonly newPages: AddressRateLimiter,
    readonly newVisitors: AddressRateLimiter,
  ) {}

  /** The budgets the settings say, with a bucket per address that has a connection at most. */
  static of(config: EdgeConfig, now: () => number): AddressPages {
    // An address with no open connection cannot join or watch: one bucket per connection at most.
    const limiter = (ratePerS: number, burst: number, what: string): AddressRateLimiter =>
      new AddressRateLimiter({ ratePerS, burst, maxAddresses: config.maxConnections, now, what });
    return new AddressPages(
      config.maxPagesPerIp,
      limiter(config.newPageRatePerS, config.newPageBurst, "new pages"),
      limiter(config.newVisitorRatePerS, config.newVisitorBurst, "new visitors"),
    );
  }

  /**
   * A viewer id new to one of `address`'s sockets: whether it counts as a unique visitor (a token of
   * the address's new visitors was left), or only as a viewer.
   */
  newVisitor(address: string): boolean {
    return this.newVisitors.tryTake(address, 1) === 0;
  }

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
