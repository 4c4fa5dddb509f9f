import { hash, timingSafeEqual } from "node:crypto";

/** The scheme's name is case-insensitive (RFC 7235, 2.1); the credential is not. */
const BEARER = /^bearer ([\x21-\x7e]+)$/i;

/** The credential of an `Authorization: Bearer <credential>` header, or undefined. */
export function bearerOf(header: string | undefined): string | undefined {
  return BEARER.exec(header ?? "")?.[1];
}

/**
 * A set of secret keys presented as bearer credentials, checked in constant time: the presented
 * key's digest is compared with every configured key's digest, all of them, whatever matched, so
 * timing tells nothing about which key or how much of it was right.
 */
export class BearerKeys {
  readonly #digests: readonly Buffer[];

  constructor(keys: readonly string[]) {
    this.#digests = keys.map(digest);
  }

  get size(): number {
    return this.#digests.length;
  }

  /** The index of the configured key `credential` is, or -1 (also for undefined). */
  indexOf(credential: string | undefined): number {
    if (credential === undefined) return -1;
    const presented = digest(credential);
    let index = -1;
    this.#digests.forEach((known, i) => {
      if (timingSafeEqual(presented, known)) index = i;
    });
    return index;
  }

  has(credential: string | undefined): boolean {
    return this.indexOf(credential) >= 0;
  }
}

/** One-shot `hash` (no Hash object per call): half the cost, on every keyed request. */
function digest(key: string): Buffer {
  return hash("sha256", key, "buffer");
}
