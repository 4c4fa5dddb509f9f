/**
 * Who a request comes from. The peer address is the client unless the peer is one of the
 * operator's trusted proxies (LIVECOUNT_TRUSTED_PROXIES); then `X-Forwarded-For` is read from the
 * right, each proxy having appended the address it got the request from, and the client is the
 * rightmost hop that is not a trusted proxy. Hops to its left are whatever the client wrote and are
 * never believed.
 */
import ipaddr from "ipaddr.js";
import type { HttpRequest } from "uWebSockets.js";

type Address = ipaddr.IPv4 | ipaddr.IPv6;
type Range = [Address, number];

/** Bits of an IPv6 address that identify one subscriber: providers hand out a /64 (or shorter). */
const IPV6_SUBSCRIBER_BITS = 64;

/**
 * A dotted IPv4 address already in canonical form (decimal, no leading zeros), as peers usually
 * are: it needs no parsing. Every upgrade and request resolves its address, and ipaddr.js's
 * validation was a visible share of a gateway's time under a reconnect storm.
 */
const CANONICAL_IPV4 = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

/** An address in canonical form (IPv4-mapped IPv6 as IPv4), or undefined when it is not one. */
function parse(text: string): Address | undefined {
  return ipaddr.isValid(text) ? ipaddr.process(text) : undefined;
}

/** `203.0.113.7:4711`, `[2001:db8::7]:4711` or `[2001:db8::7]`: a hop with its port, or bracketed. */
const HOP_WITH_PORT = /^(?:(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}|\[([0-9A-Fa-f:.]+)\](?::\d{1,5})?)$/;

/**
 * One `X-Forwarded-For` hop: an address, or an address with the port the proxy got the request from
 * (Azure's Application Gateway writes `IP:port`, and RFC 7239's `Forwarded` brackets IPv6). Read as
 * garbage, every client behind such a proxy would be pinned to the proxy and share its budgets.
 */
function parseHop(text: string): Address | undefined {
  const address = parse(text);
  if (address !== undefined) return address;
  const match = HOP_WITH_PORT.exec(text);
  return match === null ? undefined : parse(match[1] ?? match[2]!);
}

function rangeOf(text: string): Range {
  if (ipaddr.isValidCIDR(text)) return ipaddr.parseCIDR(text);
  const address = ipaddr.process(text);
  return [address, address.kind() === "ipv4" ? 32 : 128];
}

export class ClientAddresses {
  readonly #trusted: readonly Range[];

  constructor(trustedProxies: readonly string[]) {
    this.#trusted = trustedProxies.map(rangeOf);
  }

  /**
   * A request's `X-Forwarded-For`, every line of it joined with commas in order (RFC 9110: lines of
   * one field are one comma-separated list); "" when absent or when no proxy is trusted (it is never
   * read then). uWS's getHeader gives the first line only, "" for an empty one, and a proxy may add
   * its own line after the client's (HAProxy's `option forwardfor` does): read alone, the first
   * line would be the client's own words, or nothing.
   */
  forwardedForOf(req: HttpRequest): string {
    if (this.#trusted.length === 0) return "";
    const lines: string[] = [];
    req.forEach((name, value) => {
      if (name === "x-forwarded-for") lines.push(value);
    });
    return lines.join(",");
  }

  /**
   * The client's address, canonical (`203.0.113.7`, `2001:db8::1`), from the peer address uWS
   * reports and the `X-Forwarded-For` header ("" when absent).
   */
  resolve(peer: string, forwardedFor: string): string {
    if (forwardedFor === "" && CANONICAL_IPV4.test(peer)) return peer;
    let client = parse(peer);
    if (client === undefined) return peer;
    if (forwardedFor === "" || !this.#isTrusted(client)) return client.toString();
    const hops = forwardedFor.split(",");
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = parseHop(hops[i]!.trim());
      // Proxies append well-formed addresses: garbage was written by the client, so the last
      // trusted hop is the best this request can be pinned to.
      if (hop === undefined) break;
      client = hop;
      if (!this.#isTrusted(hop)) break;
    }
    return client.toString();
  }

  #isTrusted(address: Address): boolean {
    return this.#trusted.some(([base, bits]) => base.kind() === address.kind() && address.match(base, bits));
  }
}

/**
 * The key per-address limits count by: the address itself, or for IPv6 its /64, since one
 * subscriber can pick any address of their prefix.
 */
export function limitKeyOf(address: string): string {
  if (CANONICAL_IPV4.test(address)) return address;
  const parsed = parse(address);
  if (parsed === undefined || parsed.kind() === "ipv4") return address;
  const prefix = ipaddr.IPv6.networkAddressFromCIDR(`${address}/${IPV6_SUBSCRIBER_BITS}`);
  return `${prefix.toString()}/${IPV6_SUBSCRIBER_BITS}`;
}
