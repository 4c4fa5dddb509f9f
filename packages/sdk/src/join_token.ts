/**
 * Join tokens for private pages, minted on the site's server: an HS256 JWT signed with the
 * gateway's LIVECOUNT_JOIN_SECRET, granting one viewer (`sub`) one page (`page`) or every page
 * under a prefix (`prefix`) until `exp`. The browser passes it on join or watch (the widget's
 * `token` attribute) or on HTTP reads (`?token=`). Web Crypto's HMAC, so the SDK stays free of
 * dependencies; the secret must never reach a browser.
 */
import { checkPage, checkViewer } from "./ids.js";

export interface JoinTokenOptions {
  /** LIVECOUNT_JOIN_SECRET (at least 32 bytes). */
  readonly secret: string;
  /** The viewer id the holder counts as (1..128 printable ASCII): the `sub` claim. */
  readonly viewer: string;
  /** The page it opens (`page` claim); or give `prefix`. */
  readonly page?: string;
  /** Every page whose id starts with this (`prefix` claim). */
  readonly prefix?: string;
  /** How long it is accepted, in seconds from now. Default 3600. */
  readonly expiresInS?: number;
  /** "Now" in milliseconds since the epoch, for tests. Default Date.now(). */
  readonly now?: number;
}

const MIN_SECRET_BYTES = 32;
const DEFAULT_EXPIRES_IN_S = 3600;
const encoder = new TextEncoder();

function base64url(bytes: Uint8Array): string {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

const part = (value: object): string => base64url(encoder.encode(JSON.stringify(value)));

/** Mints a join token (compact JWS). Throws TypeError or RangeError for bad options. */
export async function signJoinToken(options: JoinTokenOptions): Promise<string> {
  const { secret, viewer, page, prefix } = options;
  if (encoder.encode(secret).length < MIN_SECRET_BYTES)
    throw new RangeError(`secret must be at least ${MIN_SECRET_BYTES} bytes`);
  checkViewer(viewer);
  if ((page === undefined) === (prefix === undefined)) throw new TypeError("give page or prefix, not both");
  if (page !== undefined) checkPage(page);
  if (prefix !== undefined) checkPage(prefix);
  const expiresInS = options.expiresInS ?? DEFAULT_EXPIRES_IN_S;
  if (!Number.isSafeInteger(expiresInS) || expiresInS <= 0)
    throw new RangeError("expiresInS must be a positive integer");
  const iat = Math.floor((options.now ?? Date.now()) / 1000);
  const claims = { ...(page !== undefined ? { page } : { prefix }), sub: viewer, iat, exp: iat + expiresInS };
  const signingInput = `${part({ alg: "HS256", typ: "JWT" })}.${part(claims)}`;
  const key = await crypto.subtle.importKey(
    "raw",
    encoder.encode(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const signature = await crypto.subtle.sign("HMAC", key, encoder.encode(signingInput));
  return `${signingInput}.${base64url(new Uint8Array(signature))}`;
}
