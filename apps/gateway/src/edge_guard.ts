/**
 * The door of the WebSocket endpoint: an upgrade from an origin that is not allowed is 403, one
 * past its address's socket quota 429, one past the gateway's 503, each answered before any socket
 * state exists and counted by reason.
 */
import { ProtocolError, type ErrorCode } from "@livecount/protocol";
import type { HttpRequest, HttpResponse } from "uWebSockets.js";
import { limitKeyOf, type ClientAddresses } from "./client_address.js";
import type { ConnectionLimits } from "./connection_limits.js";
import type { GatewayMetrics } from "./gateway_metrics.js";
import { Reply } from "./http_io.js";
import type { OriginPolicy } from "./origin_policy.js";

export type UpgradeRefusal = "origin" | "per_ip" | "gateway_full";

const REFUSALS: Readonly<Record<UpgradeRefusal, { readonly code: ErrorCode; readonly message: string }>> = {
  origin: { code: "forbidden", message: "this origin may not connect" },
  per_ip: { code: "rate_limited", message: "too many connections from this address" },
  gateway_full: { code: "unavailable", message: "this gateway is full; try again or another gateway" },
};
/** Seconds a refused client should wait before it tries again (its backoff usually waits longer). */
const RETRY_AFTER_S = "5";

export interface EdgeGuardOptions {
  readonly origins: OriginPolicy;
  readonly addresses: ClientAddresses;
  readonly limits: ConnectionLimits;
  readonly metrics: GatewayMetrics;
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
    if (!this.#o.origins.allows(req.getHeader("origin"))) return this.#refuse(res, "origin");
    const key = limitKeyOf(this.clientAddress(res, req));
    const refusal = this.#o.limits.refusal(key);
    return refusal === undefined ? key : this.#refuse(res, refusal);
  }

  /** The client address of an HTTP request or upgrade (LIVECOUNT_TRUSTED_PROXIES). */
  clientAddress(res: HttpResponse, req: HttpRequest): string {
    const peer = Buffer.from(res.getRemoteAddressAsText()).toString("latin1");
    return this.#o.addresses.resolve(peer, req.getHeader("x-forwarded-for"));
  }

  opened(key: string): void {
    this.#o.limits.opened(key);
  }

  closed(key: string): void {
    this.#o.limits.closed(key);
  }

  #refuse(res: HttpResponse, reason: UpgradeRefusal): undefined {
    this.#o.metrics.upgradesRefused.inc({ reason });
    const { code, message } = REFUSALS[reason];
    const err = new ProtocolError(code, message);
    new Reply(res).error(err, err.retryable ? { "retry-after": RETRY_AFTER_S } : {});
    return undefined;
  }
}
