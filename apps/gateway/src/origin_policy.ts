/**
 * Which web origins may use this gateway from a browser (LIVECOUNT_ALLOWED_ORIGINS): a WebSocket
 * upgrade carrying another `Origin` is refused, and CORS headers name only allowed origins. A
 * request without an Origin comes from a server or a tool, not from a page a visitor opened, and is
 * not refused: the Origin check keeps other sites from embedding counts, it is not authentication.
 */
export class OriginPolicy {
  readonly #allowed: ReadonlySet<string> | undefined;

  /** `allowed` undefined: any origin. */
  constructor(allowed: readonly string[] | undefined) {
    this.#allowed = allowed === undefined ? undefined : new Set(allowed);
  }

  /** Whether a request with this `Origin` header ("" when absent) may go on. */
  allows(origin: string): boolean {
    return origin === "" || this.#allowed === undefined || this.#allowed.has(origin);
  }

  /**
   * CORS headers for a public answer to a request with this `Origin`: `*` when any origin may
   * read, the origin itself (varying by Origin) when it is allowed, none otherwise.
   */
  corsHeaders(origin: string): Readonly<Record<string, string>> {
    if (this.#allowed === undefined) return ANY_ORIGIN;
    return origin !== "" && this.#allowed.has(origin)
      ? { "access-control-allow-origin": origin, vary: "Origin" }
      : VARY_ONLY;
  }
}

const ANY_ORIGIN = { "access-control-allow-origin": "*" } as const;
/** Caches must not give one origin's answer (without CORS) to another origin. */
const VARY_ONLY = { vary: "Origin" } as const;
