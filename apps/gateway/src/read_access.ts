/**
 * Who may read what over HTTP. A publisher or admin key reads anything, private pages included,
 * without a per-address budget. Anyone else pays one token per page read from their address's
 * budget (LIVECOUNT_READ_RATE / LIVECOUNT_READ_BURST), needs a join token covering each private page
 * (`?token=` or `Authorization: Bearer <token>`), and cannot list pages by prefix.
 */
import { ProtocolError } from "@livecount/protocol";
import { limitKeyOf } from "./client_address.js";
import type { PrivatePages } from "./private_pages.js";
import type { AddressRateLimiter } from "./rate_limits.js";

export interface ReadAccessOptions {
  readonly limiter: AddressRateLimiter;
  readonly privatePages: PrivatePages;
}

export class ReadAccess {
  readonly #o: ReadAccessOptions;

  /**
   * `privileged`: the request carries a publisher or admin key. `address`: the client's address.
   * `token`: a join token for private pages, if the request carries one.
   */
  constructor(
    options: ReadAccessOptions,
    readonly privileged: boolean,
    readonly address: string,
    readonly token: string | undefined,
  ) {
    this.#o = options;
  }

  /**
   * Lets a read of `pages` go on: throws RateLimitedError past the address's budget (charging
   * nothing), ProtocolError("unauthorized") for a private page the token does not cover.
   */
  async admit(pages: readonly string[]): Promise<void> {
    if (this.privileged) return;
    this.#o.limiter.take(limitKeyOf(this.address), pages.length);
    for (const page of pages)
      if (this.#o.privatePages.isPrivate(page)) await this.#o.privatePages.verify(this.token, page);
  }

  /** Listing pages by prefix shows every page id, private ones too: keys only. */
  requireKey(): void {
    if (!this.privileged)
      throw new ProtocolError(
        "unauthorized",
        "listing pages by prefix needs Authorization: Bearer <admin or publisher key>",
      );
  }
}
