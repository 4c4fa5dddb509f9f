/**
 * Private pages (LIVECOUNT_PRIVATE_PREFIXES): joining, watching or reading one needs a join token,
 * an HS256 JWT signed with LIVECOUNT_JOIN_SECRET by the site's back end, with claims
 *
 * - `page` (this exact page) or `prefix` (every page starting with it); a token naming both opens
 *   only a page both cover,
 * - `sub`: the viewer id the holder counts as (a client's own `viewer` is ignored),
 * - `exp`: when it stops being accepted (checked at join, watch or read time).
 *
 * Verification is jose's (signature, algorithm pinned to HS256, expiry with the injected clock);
 * the claims are checked here. Every failure is ProtocolError("unauthorized") carrying the page.
 */
import { ProtocolError, isTokenShape, isViewerId, TOKEN_MAX_LENGTH } from "@livecount/protocol";
import { jwtVerify } from "jose";

export interface PrivatePagesOptions {
  /** LIVECOUNT_JOIN_SECRET; undefined when no page is private. */
  readonly secret: string | undefined;
  /** LIVECOUNT_PRIVATE_PREFIXES. */
  readonly prefixes: readonly string[];
  /** Epoch-ms: `exp` is checked against this clock. */
  readonly now: () => number;
}

export class PrivatePages {
  readonly #o: PrivatePagesOptions;
  readonly #key: Uint8Array | undefined;

  constructor(options: PrivatePagesOptions) {
    this.#o = options;
    this.#key = options.secret === undefined ? undefined : new TextEncoder().encode(options.secret);
  }

  isPrivate(page: string): boolean {
    return this.#o.prefixes.some((prefix) => page.startsWith(prefix));
  }

  /**
   * Checks a join token for `page` and returns its `sub`, the viewer id it grants. Throws
   * ProtocolError("unauthorized", ..., { page }) when it is missing, forged, expired or for
   * another page.
   */
  async verify(token: string | undefined, page: string): Promise<string> {
    if (token === undefined || this.#key === undefined)
      throw unauthorized(page, "this page needs a join token");
    // The same bound as protocol v1's frames, for tokens that come over HTTP.
    if (!isTokenShape(token))
      throw unauthorized(page, `the join token must be a JWT of at most ${TOKEN_MAX_LENGTH} characters`);
    let claims: Record<string, unknown>;
    try {
      ({ payload: claims } = await jwtVerify(token, this.#key, {
        algorithms: ["HS256"],
        requiredClaims: ["exp", "sub"],
        currentDate: new Date(this.#o.now()),
      }));
    } catch (err) {
      throw unauthorized(page, "the join token is invalid or expired", err);
    }
    const { page: forPage, prefix, sub } = claims;
    // Each of the two a token names must cover the page: one naming both opens its page alone.
    const named = forPage !== undefined || prefix !== undefined;
    const covers =
      named &&
      (forPage === undefined || forPage === page) &&
      (prefix === undefined || (typeof prefix === "string" && page.startsWith(prefix)));
    if (!covers) throw unauthorized(page, "the join token is for another page");
    if (!isViewerId(sub)) throw unauthorized(page, "the join token's sub is not a valid viewer id");
    return sub;
  }
}

function unauthorized(page: string, message: string, cause?: unknown): ProtocolError {
  return new ProtocolError("unauthorized", message, cause === undefined ? { page } : { page, cause });
}
