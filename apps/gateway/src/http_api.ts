import { randomUUID } from "node:crypto";
import { MAX_WINDOW_S, ProtocolError, isCounterName, isPageId, isIdempotencyKey } from "@livecount/protocol";
import type { DcLiveness } from "@livecount/cluster";
import { BearerKeys, LogThrottle, bearerOf, type Logger } from "@livecount/runtime";
import type { Registry } from "prom-client";
import type { AdminApi } from "./admin_api.js";
import { limitKeyOf } from "./client_address.js";
import { CountersApi, MAX_CHANGE, counterPath } from "./counters_api.js";
import type { EventStreams } from "./event_streams.js";
import type { GatewayMetrics } from "./gateway_metrics.js";
import type { IncrementBatcher } from "./increment_batcher.js";
import { parseJson, readBody, type Reply, type RequestInfo } from "./http_io.js";
import type { OwnerClient } from "./owner_client.js";
import { statsBody, totalsBody } from "./page_reading.js";
import type { PrivatePages } from "./private_pages.js";
import { PublisherAuth } from "./publisher_auth.js";
import { ReadAccess } from "./read_access.js";
import { RateLimitedError, RetryLaterError, type AddressRateLimiter } from "./rate_limits.js";

export interface HttpApiOptions {
  readonly owners: OwnerClient;
  /** Publisher increments, batched per owner (increment_batcher.ts). */
  readonly increments: IncrementBatcher;
  readonly metrics: GatewayMetrics;
  readonly registry: Registry;
  readonly logger: Logger;
  readonly partitions: number;
  readonly publisherKeys: readonly string[];
  /** Requests per second one publisher key may make, sustained (LIVECOUNT_PUBLISHER_RATE). */
  readonly publisherRatePerS: number;
  /** Requests one publisher key may make at once (LIVECOUNT_PUBLISHER_BURST). */
  readonly publisherBurst: number;
  /** LIVECOUNT_ADMIN_KEY: `/metrics` and prefix listings; undefined refuses them to everyone. */
  readonly adminKey: string | undefined;
  /** Page reads without a key, per client address (LIVECOUNT_READ_RATE). */
  readonly readLimiter: AddressRateLimiter;
  /** Requests of any kind without a key, per client address (LIVECOUNT_HTTP_RATE). */
  readonly httpLimiter: AddressRateLimiter;
  readonly privatePages: PrivatePages;
  /** Epoch-ms, for rate limits. */
  readonly now: () => number;
  readonly maxBodyBytes: number;
  /** Which data centers are live: only their viewers count. */
  readonly liveness: DcLiveness;
  /** The operators' status API (admin_api.ts). */
  readonly admin: AdminApi;
  /** Server-Sent Events streams of pages (`GET /v1/pages/{page}/events`). */
  readonly events: EventStreams;
  /** Readiness: the gateway can reach an owner for every partition. */
  readonly isReady: () => boolean;
  /** Static assets served as-is (the widget, the demo page, the console). */
  readonly assets: ReadonlyMap<string, Asset>;
  /**
   * Extra `POST` routes by exact path, added by the embedding process: the demo page's buttons in
   * `npm start` (apps/standalone/src/demo_routes.ts). Errors they throw answer like any route's.
   */
  readonly routes?: ReadonlyMap<string, HttpRoute>;
}

/** A static file the gateway serves, with its content type and any headers of its own. */
export interface Asset {
  readonly body: Uint8Array;
  readonly type: string;
  readonly headers?: Readonly<Record<string, string>>;
}

/**
 * An extra route: gets the request and a reader of its JSON body (undefined when empty), and answers
 * JSON. The body is read only when the route asks, so a route can refuse a request by its headers
 * before spending anything on the body. A route that reads it must call `body()` before its first
 * await (uWS hands over the body only to a reader registered in time).
 */
export type HttpRoute = (
  request: RequestInfo,
  body: () => Promise<unknown>,
) => Promise<{ readonly status: number; readonly body: unknown }>;

const PAGE_COUNTER = /^\/v1\/pages\/(.+)\/counter$/;
const PAGE_EVENTS = /^\/v1\/pages\/(.+)\/events$/;
const PAGE_STATS = /^\/v1\/pages\/(.+)\/stats$/;
const ADMIN_PAGE = /^\/v1\/admin\/pages\/([^/]+)$/;
/** Matched first: a page id with '/' must be percent-encoded here. */
const NAMED_COUNTER = /^\/v1\/pages\/([^/]+)\/counters\/([^/]+)(\/reset|\/window)?$/;
const NO_STORE = { "cache-control": "no-store" } as const;

function decodePathSegment(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch (err) {
    throw new ProtocolError("invalid_page", "page id is not valid percent-encoding", { cause: err });
  }
}

/** The public HTTP API of protocol v1, plus health, readiness, metrics and static assets. */
export class HttpApi {
  readonly #o: HttpApiOptions;
  /** Lines that can repeat per request or message, throttled (LogThrottle). */
  readonly #logs = new LogThrottle();
  readonly #auth: PublisherAuth;
  readonly #admin: BearerKeys;
  readonly #counters: CountersApi;

  constructor(options: HttpApiOptions) {
    this.#o = options;
    this.#auth = new PublisherAuth({
      keys: options.publisherKeys,
      ratePerS: options.publisherRatePerS,
      burst: options.publisherBurst,
      now: options.now,
    });
    this.#admin = new BearerKeys(options.adminKey !== undefined ? [options.adminKey] : []);
    this.#counters = new CountersApi({
      owners: options.owners,
      increments: options.increments,
      partitions: options.partitions,
      liveness: options.liveness,
    });
  }

  /** Answers one request; reads carry CORS already (`reply.common`, set by HttpRequests.serve). */
  async handle(reply: Reply, req: RequestInfo): Promise<void> {
    let route = "other";
    let status = 200;
    try {
      this.#admitRequest(reply, req);
      const asset = req.method === "GET" ? this.#o.assets.get(req.path) : undefined;
      if (asset !== undefined) {
        route = "asset";
        return reply.send(200, asset.body, {
          "content-type": asset.type,
          "cache-control": "public, max-age=300",
          ...asset.headers,
        });
      }
      switch (req.path) {
        case "/healthz":
          route = "healthz";
          if (req.method !== "GET") throw methodNotAllowed(req, "GET");
          return reply.json(200, { status: "ok" }, NO_STORE);
        case "/readyz":
          route = "readyz";
          if (req.method !== "GET") throw methodNotAllowed(req, "GET");
          return this.#o.isReady()
            ? reply.json(200, { status: "ready" }, NO_STORE)
            : reply.json(503, { status: "not_ready" }, NO_STORE);
        case "/metrics":
          route = "metrics";
          reply.common = {};
          if (req.method !== "GET") throw methodNotAllowed(req, "GET");
          this.#requireAdmin(req);
          return reply.send(200, await this.#o.registry.metrics(), {
            "content-type": this.#o.registry.contentType,
            ...NO_STORE,
          });
        case "/ws":
          // What uWS did not take as an upgrade: no 24-character key (EdgeGuard refuses the rest).
          route = "ws";
          if (req.method !== "GET") throw methodNotAllowed(req, "GET");
          throw new ProtocolError(
            "upgrade_required",
            "/ws takes a WebSocket upgrade (RFC 6455: Upgrade: websocket, a Sec-WebSocket-Key, Sec-WebSocket-Version 13)",
          );
      }
      const extra = this.#o.routes?.get(req.path);
      if (extra !== undefined) {
        route = "extra";
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        const answer = await extra(req, async () => {
          const raw = await readBody(reply, this.#o.maxBodyBytes);
          return raw.length === 0 ? undefined : parseJson(raw);
        });
        return reply.json(answer.status, answer.body, NO_STORE);
      }
      if (req.path === "/v1/counters/increment") {
        route = "counters_increment";
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        // A batch costs one rate token per item: the request's own before its body is read, so a
        // body refused (too large, malformed, rate) costs that one, the rest once it says how many.
        const key = this.#auth.authenticate(req.headers);
        this.#auth.charge(key, 1);
        return await this.#counters.increment(reply, (items) => this.#auth.chargeBatch(key, items));
      }
      if (req.path === "/v1/admin/status") {
        route = "admin_status";
        if (req.method !== "GET") throw methodNotAllowed(req, "GET");
        this.#requireAdmin(req);
        return reply.json(200, await this.#o.admin.status(), NO_STORE);
      }
      if (req.path === "/v1/admin/pages") {
        route = "admin_pages";
        if (req.method !== "GET") throw methodNotAllowed(req, "GET");
        this.#requireAdmin(req);
        const q = new URLSearchParams(req.query);
        // A listing of every page unless it names pages or a prefix.
        if (!q.has("prefix") && !q.has("page")) q.set("prefix", "");
        return await this.#counters.read(reply, { ...req, query: q.toString() }, this.#readAccess(req));
      }
      if (req.path === "/v1/admin/purge") {
        route = "admin_purge";
        if (req.method !== "POST") throw methodNotAllowed(req, "POST");
        this.#requireAdmin(req);
        const olderThanS = parsePurge(parseJson(await readBody(reply, this.#o.maxBodyBytes)));
        return reply.json(200, await this.#o.admin.purge(olderThanS), NO_STORE);
      }
      const adminPage = ADMIN_PAGE.exec(req.path);
      if (adminPage !== null) {
        route = "admin_page";
        if (req.method !== "GET") throw methodNotAllowed(req, "GET");
        this.#requireAdmin(req);
        const page = decodePathSegment(adminPage[1]!);
        if (!isPageId(page)) throw new ProtocolError("invalid_page");
        return reply.json(200, await this.#o.admin.page(page), NO_STORE);
      }
      if (req.path === "/v1/counters") {
        route = "counters";
        if (req.method !== "GET") throw methodNotAllowed(req, "GET");
        return await this.#counters.read(reply, req, this.#readAccess(req));
      }
      const named = NAMED_COUNTER.exec(req.path);
      if (named !== null && named[3] === "/window") {
        route = "counter_window";
        const { page, counter } = counterPath(named[1]!, named[2]!);
        if (req.method !== "GET") throw methodNotAllowed(req, "GET");
        return await this.#window(reply, req, page, counter);
      }
      if (named !== null) {
        const reset = named[3] !== undefined;
        route = reset ? "counter_reset" : "counter";
        const { page, counter } = counterPath(named[1]!, named[2]!);
        if (req.method !== (reset ? "POST" : "DELETE"))
          throw methodNotAllowed(req, reset ? "POST" : "DELETE");
        // Operators delete counters from the console with the admin key; publishers with theirs.
        if (!this.#isAdmin(req)) this.#authorize(req);
        return await this.#counters.reset(reply, req, page, counter, !reset);
      }
      const stats = PAGE_STATS.exec(req.path);
      if (stats !== null) {
        route = "page_stats";
        if (req.method !== "GET") throw methodNotAllowed(req, "GET");
        const page = decodePathSegment(stats[1]!);
        if (!isPageId(page)) throw new ProtocolError("invalid_page");
        await this.#readAccess(req).admit([page]);
        return reply.json(
          200,
          statsBody(await this.#o.owners.forPage(page, { type: "stats", page }), this.#o.liveness),
          NO_STORE,
        );
      }
      const events = PAGE_EVENTS.exec(req.path);
      if (events !== null) {
        route = "page_events";
        if (req.method !== "GET") throw methodNotAllowed(req, "GET");
        const page = decodePathSegment(events[1]!);
        if (!isPageId(page)) throw new ProtocolError("invalid_page");
        // A read like GET .../counter: the same budget and the same check of private pages.
        await this.#readAccess(req).admit([page]);
        return this.#o.events.open(reply, req, page);
      }
      const m = PAGE_COUNTER.exec(req.path);
      if (m !== null) {
        route = "page_counter";
        const page = decodePathSegment(m[1]!);
        if (!isPageId(page)) throw new ProtocolError("invalid_page");
        if (req.method === "GET") return await this.#read(reply, page, this.#readAccess(req));
        if (req.method === "PUT") return await this.#change(reply, req, page);
        throw methodNotAllowed(req, "GET", "PUT");
      }
      throw new ProtocolError("not_found", `no route for ${req.method} ${req.path}`);
    } catch (err) {
      const e = err instanceof ProtocolError ? err : new ProtocolError("internal", undefined, { cause: err });
      if (e.code === "internal")
        this.#logs.log(this.#o.logger, "error", { err, path: req.path }, "http request failed");
      status = e.status;
      const retryAfterS = e instanceof RetryLaterError ? e.retryAfterS : 1;
      const headers = e.retryable ? { ...NO_STORE, "retry-after": String(retryAfterS) } : NO_STORE;
      reply.error(e, e instanceof MethodNotAllowed ? { ...headers, allow: e.allow } : headers);
    } finally {
      this.#o.metrics.httpRequests.inc({ route, status: String(status) });
    }
  }

  async #read(reply: Reply, page: string, access: ReadAccess): Promise<void> {
    await access.admit([page]);
    const state = await this.#o.owners.forPage(page, {
      type: "snapshot",
      page,
    });
    reply.json(200, totalsBody(page, state, this.#o.liveness), NO_STORE);
  }

  /** `GET /v1/pages/{page}/counters/{counter}/window?seconds=N`: a read, like the page's counter. */
  async #window(reply: Reply, req: RequestInfo, page: string, counter: string): Promise<void> {
    const seconds = windowSecondsOf(new URLSearchParams(req.query).get("seconds"));
    await this.#readAccess(req).admit([page]);
    const total = await this.#o.owners.forPage(page, { type: "window", page, counter, seconds });
    reply.json(200, { page, counter, window_s: seconds, value: total.value, updated_at: total.ts }, NO_STORE);
  }

  async #change(reply: Reply, req: RequestInfo, page: string): Promise<void> {
    this.#authorize(req);
    const key = req.headers["idempotency-key"] ?? randomUUID();
    if (!isIdempotencyKey(key)) throw new ProtocolError("invalid_idempotency_key");
    const body = parseJson(await readBody(reply, this.#o.maxBodyBytes));
    const { counter, delta } = parseChange(body);
    const result = await this.#o.increments.increment({ type: "increment", page, counter, delta, key });
    reply.json(
      200,
      { page, counter, value: result.value, updated_at: result.updatedAt },
      result.duplicate ? { ...NO_STORE, "idempotent-replayed": "true" } : NO_STORE,
    );
  }

  /**
   * A request without a publisher or admin key takes a token from its address's HTTP budget; past
   * it the answer closes the connection, so keep-alive connections cannot pile up past the budget.
   */
  #admitRequest(reply: Reply, req: RequestInfo): void {
    if (this.#isKeyed(req)) return;
    const retryAfterS = this.#o.httpLimiter.tryTake(limitKeyOf(req.address), 1);
    if (retryAfterS === 0) return;
    reply.closeConnection = true;
    throw new RateLimitedError(retryAfterS, `too many requests from this address; retry in ${retryAfterS} s`);
  }

  /** A publisher key (compared in constant time) with a token left in its rate limit. */
  #authorize(req: RequestInfo): void {
    this.#auth.authorize(req.headers);
  }

  /** The request carries a publisher or the admin key: it is charged to the key, not its address. */
  #isKeyed(req: RequestInfo): boolean {
    return this.#auth.recognizes(req.headers) || this.#isAdmin(req);
  }

  #isAdmin(req: RequestInfo): boolean {
    return this.#admin.has(bearerOf(req.headers.authorization));
  }

  #requireAdmin(req: RequestInfo): void {
    if (!this.#isAdmin(req))
      throw new ProtocolError("unauthorized", "Authorization: Bearer <admin key> is required");
  }

  /** What a read may see and what it costs (read_access.ts). */
  #readAccess(req: RequestInfo): ReadAccess {
    const token = new URLSearchParams(req.query).get("token") ?? bearerOf(req.headers.authorization);
    const { readLimiter: limiter, privatePages } = this.#o;
    return new ReadAccess({ limiter, privatePages }, this.#isKeyed(req), req.address, token);
  }
}

/** A 405, with the `Allow` header its answer must carry (RFC 9110): a GET route serves HEAD too. */
class MethodNotAllowed extends ProtocolError {
  override name = "MethodNotAllowed";
  readonly allow: string;

  constructor(method: string, allowed: readonly string[]) {
    super("method_not_allowed", `${method} is not allowed here; use ${allowed.join(" or ")}`);
    this.allow = allowed.flatMap((m) => (m === "GET" ? ["GET", "HEAD"] : [m])).join(", ");
  }
}

function methodNotAllowed(req: RequestInfo, ...allowed: string[]): MethodNotAllowed {
  return new MethodNotAllowed(req.method, allowed);
}

/** `seconds` of a window read: an integer from 1 to MAX_WINDOW_S. */
function windowSecondsOf(v: string | null): number {
  const n = v !== null && /^\d{1,6}$/.test(v) ? Number(v) : 0;
  if (n < 1 || n > MAX_WINDOW_S)
    throw new ProtocolError("invalid_query", `seconds must be an integer from 1 to ${MAX_WINDOW_S}`);
  return n;
}

/** The oldest a purge may ask for: ten years, in seconds. */
const MAX_PURGE_AGE_S = 10 * 365 * 86_400;

/** Validates a purge body: `{"older_than_s": N}`, 0..MAX_PURGE_AGE_S. */
function parsePurge(body: unknown): number {
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw new ProtocolError("invalid_body", "body must be a JSON object");
  const { older_than_s: age, ...rest } = body as Record<string, unknown>;
  const unknown = Object.keys(rest);
  if (unknown.length > 0) throw new ProtocolError("invalid_body", `unknown field ${unknown[0]}`);
  if (typeof age !== "number" || !Number.isSafeInteger(age) || age < 0 || age > MAX_PURGE_AGE_S)
    throw new ProtocolError(
      "invalid_body",
      `older_than_s must be an integer of seconds, 0..${MAX_PURGE_AGE_S}`,
    );
  return age;
}

/** Validates a PUT body: `{"action":"increment"|"decrement","counter":"likes","by":1}`. */
export function parseChange(body: unknown): { counter: string; delta: number } {
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw new ProtocolError("invalid_body", "body must be a JSON object");
  const { action, counter, by = 1 } = body as Record<string, unknown>;
  if (action !== "increment" && action !== "decrement")
    throw new ProtocolError("invalid_body", 'action must be "increment" or "decrement"');
  if (!isCounterName(counter)) throw new ProtocolError("invalid_counter");
  if (typeof by !== "number" || !Number.isSafeInteger(by) || by < 1 || by > MAX_CHANGE) {
    throw new ProtocolError("invalid_body", `by must be an integer from 1 to ${MAX_CHANGE}`);
  }
  return { counter, delta: action === "increment" ? by : -by };
}
