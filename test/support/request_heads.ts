/**
 * Request heads of an exact size, for the tests of LIVECOUNT_MAX_HEADER_BYTES: a read and a
 * WebSocket upgrade, each up to the value of its last header, padded to the size asked.
 */

/** A read up to its padding header's value. */
export const PADDED_GET = "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Padding: ";

/** A WebSocket upgrade up to its Cookie header's value, as a browser sends the cookies of the gateway's domain. */
export const PADDED_UPGRADE =
  "GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nCookie: ";

/**
 * A request head of exactly `bytes` (the request line and headers with the blank line that ends
 * them, as uWS counts them): `start` padded in its last header's value.
 */
export function headOf(bytes: number, start: string): string {
  return `${start}${"a".repeat(bytes - start.length - 4)}\r\n\r\n`;
}
