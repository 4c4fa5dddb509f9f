/**
 * The gateway's public-edge settings: who may connect and from where, how much an address may
 * take, private pages and TLS. Each is documented with its variable, default and reason;
 * docs/security.md says which ones production must set.
 */
import { accessSync, constants } from "node:fs";
import { isPagePrefix } from "@livecount/protocol";
import { ConfigError, readInt, readList, readOptionalString, type Env } from "@livecount/runtime";
import ipaddr from "ipaddr.js";

export interface EdgeConfig {
  /**
   * LIVECOUNT_ALLOWED_ORIGINS: origins (`https://news.example`) whose pages may open sockets; a
   * WebSocket upgrade from another Origin is 403, and HTTP CORS headers name only these. Requests
   * without an Origin (servers, not browsers) are not refused. Default: any origin.
   */
  readonly allowedOrigins: readonly string[] | undefined;
  /**
   * LIVECOUNT_MAX_CONNECTIONS_PER_IP: sockets and event streams one client address may hold here;
   * past it the upgrade or the stream is 429. Default 500: a whole office or mobile carrier behind one NAT address still fits,
   * one machine cannot take the gateway's file descriptors. IPv6 addresses count per /64.
   */
  readonly maxConnectionsPerIp: number;
  /**
   * LIVECOUNT_MAX_CONNECTIONS: sockets and event streams this gateway holds; past it the upgrade or
   * the stream is 503 (clients try again, or another gateway). Default 18000: the process may open 20,000 files, and the rest is
   * kept for HTTP clients, the bus and the listen socket, so a full gateway still answers health
   * checks and reads instead of failing accept().
   */
  readonly maxConnections: number;
  /**
   * LIVECOUNT_MAX_PAGES_PER_IP: pages one client address may have joined or watched here at once,
   * over all its sockets; past it a join or watch is answered `too_many_pages`. Every such page holds
   * state here and on its owner, so this bounds what one address can make the platform remember
   * whatever it invents. Default 4096: 500 sockets behind one NAT address with eight widgets each.
   */
  readonly maxPagesPerIp: number;
  /**
   * LIVECOUNT_NEW_PAGE_RATE / LIVECOUNT_NEW_PAGE_BURST: joins and watches per second one client
   * address may make of pages no socket here has, sustained / at once; past it the frame is answered
   * `rate_limited`. A page a viewer joins is stored until it has been empty for
   * LIVECOUNT_EMPTY_PAGE_TTL_S, so this bounds what one address can make the store keep: at most rate
   * × TTL pages per gateway. Joins of pages someone here already has are free. A refused page is
   * asked for again by the widget and the SDK a few seconds later. Default 20 / 1000: an office behind
   * one NAT address opening a new page every 25 s each, and all its open pages coming back at once
   * when a gateway restarts (up to 1,000 not held here), while a script inventing page ids leaves at
   * most 72,000 pages an hour on each gateway it reaches.
   */
  readonly newPageRatePerS: number;
  readonly newPageBurst: number;
  /**
   * LIVECOUNT_NEW_VISITOR_RATE / LIVECOUNT_NEW_VISITOR_BURST: viewer ids new to a socket, per second,
   * that one client address may have counted as unique visitors, sustained / at once. Past it a join
   * still counts its viewer (presence stays exact) but not as a visitor: ids are chosen by clients,
   * so without it a script joining with a fresh id each time adds a visitor each, some 10,000 a
   * second from one address, and fills the pages' unique-visitor registers (stored per page and
   * day). A browser keeps one id, and a socket that joins many pages as it spends one token.
   * Default 20 / 1000: an office behind one NAT address opening a page every 25 s each, and all its
   * open tabs coming back at once when a gateway restarts.
   */
  readonly newVisitorRatePerS: number;
  readonly newVisitorBurst: number;
  /**
   * LIVECOUNT_TRUSTED_PROXIES: addresses or CIDRs (`10.0.0.0/8`) of the load balancers in front.
   * Only a connection from one of them has its `X-Forwarded-For` believed, and then the client is
   * the rightmost hop that is not a trusted proxy. Default: none (the peer address is the client).
   */
  readonly trustedProxies: readonly string[];
  /**
   * LIVECOUNT_READ_RATE / LIVECOUNT_READ_BURST: page reads per second one client address may make
   * over HTTP without a key, sustained / at once (a read of n pages costs n); past it 429 with
   * Retry-After. Default 100 / 200: ten times what a dashboard polling a page per second needs,
   * little for a script enumerating pages. Reads with a publisher or admin key are not limited here.
   */
  readonly readRatePerS: number;
  readonly readBurst: number;
  /**
   * LIVECOUNT_HTTP_RATE / LIVECOUNT_HTTP_BURST: HTTP requests of any kind per second one client
   * address may make without a publisher or admin key, sustained / at once; past it 429 with
   * Retry-After, and the connection is closed. A keep-alive connection must carry a request every
   * 10 s (uWS's idle timeout) to stay open, so this also bounds the connections one address holds
   * to about rate × 10 s. Default 100 / 200, the read budget's (a one-page read takes a token from
   * each, and this budget is checked first): one address holds at most ~1,000 connections, half the
   * files a full gateway keeps for HTTP.
   */
  readonly httpRatePerS: number;
  readonly httpBurst: number;
  /**
   * LIVECOUNT_READ_RATE_MAX_ADDRESSES: addresses whose read budget, and apart from it whose request
   * budget (LIVECOUNT_HTTP_RATE), are remembered at once; the least recently seen is forgotten past
   * it. Default 10000 (about 1.5 MB a budget): rotating addresses cannot grow memory, and an
   * evicted address only gets a full bucket back. (The page and visitor budgets remember one
   * address per connection the gateway may hold, LIVECOUNT_MAX_CONNECTIONS: an address without one
   * cannot join.)
   */
  readonly readRateMaxAddresses: number;
  /**
   * LIVECOUNT_JOIN_SECRET: the HS256 secret join tokens of private pages are signed with, at least
   * 32 bytes (RFC 7518: a key as long as the hash). Required when LIVECOUNT_PRIVATE_PREFIXES is set.
   */
  readonly joinSecret: string | undefined;
  /**
   * LIVECOUNT_PRIVATE_PREFIXES: page-id prefixes of private pages (`user-`); joining, watching or
   * reading one needs a token signed with LIVECOUNT_JOIN_SECRET (or, over HTTP, a publisher key).
   * Default: none.
   */
  readonly privatePrefixes: readonly string[];
  /**
   * LIVECOUNT_TLS_CERT_FILE / LIVECOUNT_TLS_KEY_FILE: PEM certificate (chain) and key; when both
   * are set the gateway serves https and wss itself. Default: plain http/ws (TLS ends at a proxy).
   */
  readonly tls: { readonly certFile: string; readonly keyFile: string } | undefined;
}

/** RFC 7518 3.2: an HS256 key must be at least as long as the hash output. */
const MIN_JOIN_SECRET_BYTES = 32;

export function readEdgeConfig(env: Env): EdgeConfig {
  const origins = readList(env, "LIVECOUNT_ALLOWED_ORIGINS").map(originOf);
  return {
    allowedOrigins: origins.length > 0 ? origins : undefined,
    maxConnectionsPerIp: readInt(env, "LIVECOUNT_MAX_CONNECTIONS_PER_IP", 500, { min: 1 }),
    maxConnections: readInt(env, "LIVECOUNT_MAX_CONNECTIONS", 18000, { min: 1 }),
    maxPagesPerIp: readInt(env, "LIVECOUNT_MAX_PAGES_PER_IP", 4096, { min: 1 }),
    newPageRatePerS: readInt(env, "LIVECOUNT_NEW_PAGE_RATE", 20, { min: 1 }),
    newPageBurst: readInt(env, "LIVECOUNT_NEW_PAGE_BURST", 1000, { min: 1 }),
    newVisitorRatePerS: readInt(env, "LIVECOUNT_NEW_VISITOR_RATE", 20, { min: 1 }),
    newVisitorBurst: readInt(env, "LIVECOUNT_NEW_VISITOR_BURST", 1000, { min: 1 }),
    trustedProxies: readList(env, "LIVECOUNT_TRUSTED_PROXIES").map(checkProxy),
    readRatePerS: readInt(env, "LIVECOUNT_READ_RATE", 100, { min: 1 }),
    readBurst: readInt(env, "LIVECOUNT_READ_BURST", 200, { min: 1 }),
    httpRatePerS: readInt(env, "LIVECOUNT_HTTP_RATE", 100, { min: 1 }),
    httpBurst: readInt(env, "LIVECOUNT_HTTP_BURST", 200, { min: 1 }),
    readRateMaxAddresses: readInt(env, "LIVECOUNT_READ_RATE_MAX_ADDRESSES", 10000, { min: 1 }),
    ...readPrivatePages(env),
    tls: readTls(env),
  };
}

/** An origin as browsers send it: scheme, host and port, nothing else. */
function originOf(value: string): string {
  const url = URL.canParse(value) ? new URL(value) : undefined;
  const web = url?.protocol === "https:" || url?.protocol === "http:";
  if (url === undefined || !web || url.href !== `${url.origin}/`)
    throw new ConfigError(
      `LIVECOUNT_ALLOWED_ORIGINS: "${value}" is not an origin like https://news.example or http://localhost:8080`,
    );
  return url.origin;
}

function checkProxy(value: string): string {
  if (!ipaddr.isValidCIDR(value) && !ipaddr.isValid(value))
    throw new ConfigError(`LIVECOUNT_TRUSTED_PROXIES: "${value}" is not an IP address or CIDR`);
  return value;
}

function readPrivatePages(env: Env): Pick<EdgeConfig, "joinSecret" | "privatePrefixes"> {
  const joinSecret = readOptionalString(env, "LIVECOUNT_JOIN_SECRET");
  const privatePrefixes = readList(env, "LIVECOUNT_PRIVATE_PREFIXES");
  if (joinSecret !== undefined && Buffer.byteLength(joinSecret) < MIN_JOIN_SECRET_BYTES)
    throw new ConfigError(`LIVECOUNT_JOIN_SECRET must be at least ${MIN_JOIN_SECRET_BYTES} bytes`);
  for (const prefix of privatePrefixes) {
    if (!isPagePrefix(prefix))
      throw new ConfigError(
        `LIVECOUNT_PRIVATE_PREFIXES: "${prefix}" is not 1..128 printable ASCII characters`,
      );
  }
  if (privatePrefixes.length > 0 && joinSecret === undefined)
    throw new ConfigError("LIVECOUNT_PRIVATE_PREFIXES needs LIVECOUNT_JOIN_SECRET to verify join tokens");
  return { joinSecret, privatePrefixes };
}

function readTls(env: Env): EdgeConfig["tls"] {
  const certFile = readOptionalString(env, "LIVECOUNT_TLS_CERT_FILE");
  const keyFile = readOptionalString(env, "LIVECOUNT_TLS_KEY_FILE");
  if (certFile === undefined && keyFile === undefined) return undefined;
  if (certFile === undefined || keyFile === undefined)
    throw new ConfigError("LIVECOUNT_TLS_CERT_FILE and LIVECOUNT_TLS_KEY_FILE must be set together");
  for (const [name, file] of [
    ["LIVECOUNT_TLS_CERT_FILE", certFile],
    ["LIVECOUNT_TLS_KEY_FILE", keyFile],
  ] as const) {
    try {
      accessSync(file, constants.R_OK);
    } catch (err) {
      throw new ConfigError(`${name}: cannot read ${file}`, { cause: err });
    }
  }
  return { certFile, keyFile };
}
