/**
 * The door of the WebSocket endpoint: an upgrade from an origin that is not allowed is 403, one
 * past its address's socket quota 429, one past the gateway's 503 (and any while the gateway stops),
 * each answered before any socket state exists and counted by reason. Event streams (`GET /v1/pages/{page}/events`) pass the same
 * quotas and get the same refusals.
 */
import { ProtocolError, type ErrorCode } from "@livecount/protocol";
import type { HttpRequest, HttpResponse } from "uWebSockets.js";
import { limitKeyOf, type ClientAddresses } from "./client_address.js";
import type { ConnectionLimits } from "./connection_limits.js";
import type { GatewayMetrics } from "./gateway_metrics.js";
import { Reply, WEBSOCKET_VERSION, ambiguousLength } from "./http_io.js";
import type { OriginPolicy } from "./origin_policy.js";
import { RetryLaterError } from "./rate_limits.js";

export type UpgradeRefusal =
  "not_websocket" | "key" | "version" | "origin" | "per_ip" | "gateway_full" | "stopping";

const REFUSALS: Readonly<Record<UpgradeRefusal, { readonly code: ErrorCode; readonly message: string }>> = {
  not_websocket: {
    code: "upgrade_required",
    message: "a WebSocket upgrade needs Upgrade: websocket and Connection: Upgrade",
  },
  key: {
    code: "upgrade_required",
    message: "Sec-WebSocket-Key must be the base64 of 16 random bytes (RFC 6455 4.1)",
  },
  version: { code: "upgrade_required", message: "this gateway speaks WebSocket version 13 only" },
  origin: { code: "forbidden", message: "this origin may not connect" },
  per_ip: { code: "rate_limited", message: "too many connections from this address" },
  gateway_full: { code: "unavailable", message: "this gateway is full; try again or another gateway" },
  stopping: { code: "unavailable", message: "this gateway is stopping; try again or another gateway" },
};
/**
 * Seconds a client refused for a full quota (its address's or the gateway's) should wait before it
 * tries again: the quota frees as connections close, not at once (its backoff usually waits longer).
 */
const RETRY_AFTER_S = 5;
/** Seconds a client refused by a stopping gateway should wait: another gateway takes it, as for requests. */
const STOPPING_RETRY_S = 1;

export interface EdgeGuardOptions {
  readonly origins: OriginPolicy;
  readonly addresses: ClientAddresses;
  readonly limits: ConnectionLimits;
  readonly metrics: GatewayMetrics;
  /**
   * Whether the gateway is stopping: its sockets were ended and it announced them gone, so an
   * upgrade on a connection kept alive (a proxy's pool) must not open another.
   */
  readonly stopping: () => boolean;
}

export class EdgeGuard {
  readonly #o: EdgeGuardOptions;

  constructor(options: EdgeGuardOptions) {
    this.#o = options;
  }

  /**
   * Admits an upgrade request and returns the key its socket counts under (`opened`/`closed`), or
   * answers it with the refusal and returns undefined. Runs inside uWS's upgrade handler.
   */
  admit(res: HttpResponse, req: HttpRequest): string | undefined {
    // As for any request (HttpRequests.serve): what follows it may be a request a proxy never sent.
    if (ambiguousLength(req) !== undefined) {
      this.#o.metrics.requestsDropped.inc({ reason: "ambiguous_length" });
      res.close();
      return undefined;
    }
    // uWS takes any request to /ws with a 24-character key for an upgrade; RFC 6455 4.2.1 asks for
    // both headers, and a proxy passes a request without them on as plain HTTP (it would hang).
    if (!isWebSocketUpgrade(req)) return this.#refuse(res, "not_websocket");
    // uWS checks the key's length only; RFC 6455 4.2.1 asks for the base64 of 16 bytes.
    if (!WEBSOCKET_KEY.test(req.getHeader("sec-websocket-key"))) return this.#refuse(res, "key");
    // RFC 6455 4.4: a version the server does not speak is refused with the one it does. Versions
    // before 13 were drafts (hybi); uWS would frame them as 13.
    if (req.getHeader("sec-websocket-version") !== WEBSOCKET_VERSION) return this.#refuse(res, "version");
    if (this.#o.stopping()) return this.#refuse(res, "stopping");
    if (!this.#o.origins.allows(req.getHeader("origin"))) return this.#refuse(res, "origin");
    const key = limitKeyOf(this.clientAddress(res, req));
    const refusal = this.#o.limits.refusal(key);
    // Every socket keeps its key: one string per address, not one per socket.
    return refusal === undefined ? this.#o.limits.interned(key) : this.#refuse(res, refusal);
  }

  /**
   * Admits an event stream from `address` (a client address, resolved) and returns the key it
   * counts under, or throws the error a refused upgrade answers with. Origins are not refused: a
   * stream is a read, and reads name only allowed origins in their CORS headers.
   */
  admitStream(address: string): string {
    const key = limitKeyOf(address);
    const refusal = this.#o.limits.refusal(key);
    if (refusal !== undefined) throw refusalError(refusal);
    return key;
  }

  /** The client address of an HTTP request or upgrade (LIVECOUNT_TRUSTED_PROXIES). */
  clientAddress(res: HttpResponse, req: HttpRequest): string {
    return this.clientAddressOf(res, this.forwardedForOf(req));
  }

  /** The request's `X-Forwarded-For`, all its lines (ClientAddresses.forwardedForOf). */
  forwardedForOf(req: HttpRequest): string {
    return this.#o.addresses.forwardedForOf(req);
  }

  /** `clientAddress` from the request's `X-Forwarded-For` ("" when absent), read beforehand. */
  clientAddressOf(res: HttpResponse, forwardedFor: string): string {
    const peer = Buffer.from(res.getRemoteAddressAsText()).toString("latin1");
    return this.#o.addresses.resolve(peer, forwardedFor);
  }

  opened(key: string): void {
    this.#o.limits.opened(key);
  }

  /** A socket closed: its slot is held while its viewers may linger (connection_limits.ts). */
  closed(key: string): void {
    this.#o.limits.closed(key);
  }

  /** An event stream closed: it never counted a viewer, so its slot is free at once. */
  streamClosed(key: string): void {
    this.#o.limits.released(key);
  }

  /**
   * Answers a refused upgrade and closes its connection: left open, it could ask again and again
   * without spending the address's request budget, and hold a descriptor of the gateway for each.
   */
  #refuse(res: HttpResponse, reason: UpgradeRefusal): undefined {
    this.#o.metrics.upgradesRefused.inc({ reason });
    const err = refusalError(reason);
    const reply = new Reply(res);
    reply.closeConnection = true;
    reply.error(err, err instanceof RetryLaterError ? { "retry-after": String(err.retryAfterS) } : {});
    return undefined;
  }
}

/**
 * Every `Sec-WebSocket-Protocol` line of an upgrade as one list: RFC 6455 11.3.4 makes several lines
 * the same as one naming all their values (browsers send one; `getHeader` reads the first only).
 */
export function offeredSubprotocols(req: HttpRequest): string {
  let offer = "";
  req.forEach((name, value) => {
    if (name === "sec-websocket-protocol") offer = offer === "" ? value : `${offer}, ${value}`;
  });
  return offer;
}

/** The base64 of 16 bytes: 22 characters and the padding. */
const WEBSOCKET_KEY = /^[A-Za-z0-9+/]{22}==$/;

/** `Upgrade: websocket` and a `Connection` naming `upgrade` among its options, in any case. */
function isWebSocketUpgrade(req: HttpRequest): boolean {
  if (!/^\s*websocket\s*$/i.test(req.getHeader("upgrade"))) return false;
  return req
    .getHeader("connection")
    .split(",")
    .some((option) => option.trim().toLowerCase() === "upgrade");
}

function refusalError(reason: UpgradeRefusal): ProtocolError {
  const { code, message } = REFUSALS[reason];
  return reason === "origin" || code === "upgrade_required"
    ? new ProtocolError(code, message)
    : new RetryLaterError(code, reason === "stopping" ? STOPPING_RETRY_S : RETRY_AFTER_S, message);
}
