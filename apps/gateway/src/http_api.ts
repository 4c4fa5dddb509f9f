import { randomUUID, timingSafeEqual, createHash } from "node:crypto";
import {
  ProtocolError,
  VIEWERS_COUNTER,
  isCounterName,
  isPageId,
  isViewerId,
  type IncrementReply,
  type PageStateReply,
} from "@livecount/protocol";
import { partitionOf } from "@livecount/ring";
import type { Logger } from "@livecount/runtime";
import type { Registry } from "prom-client";
import type { GatewayMetrics } from "./gateway_metrics.js";
import { parseJson, readBody, type Reply, type RequestInfo } from "./http_io.js";
import type { OwnerClient } from "./owner_client.js";

/** Largest change one request may make to a counter. */
export const MAX_CHANGE = 1_000_000_000;

export interface HttpApiOptions {
  readonly owners: OwnerClient;
  readonly metrics: GatewayMetrics;
  readonly registry: Registry;
  readonly logger: Logger;
  readonly partitions: number;
  readonly publisherKeys: readonly string[];
  readonly maxBodyBytes: number;
  /** Readiness: the gateway can reach an owner for every partition. */
  readonly isReady: () => boolean;
  /** Static assets served as-is (the widget, the demo page). */
  readonly assets: ReadonlyMap<string, { readonly body: Uint8Array; readonly type: string }>;
  /** When set, `POST /demo/like` adds a like to this page without a key (the demo page's button). */
  readonly demoPage?: string;
}

interface CounterReadBody {
  page: string;
  count: number;
  viewers: number;
  counters: Record<string, number>;
  updated_at: number;
}

const PAGE_COUNTER = /^\/v1\/pages\/(.+)\/counter$/;
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
  readonly #keyDigests: Buffer[];

  constructor(options: HttpApiOptions) {
    this.#o = options;
    this.#keyDigests = options.publisherKeys.map((k) => createHash("sha256").update(k).digest());
  }

  async handle(reply: Reply, req: RequestInfo): Promise<void> {
    let route = "other";
    let status = 200;
    try {
      const asset = req.method === "GET" ? this.#o.assets.get(req.path) : undefined;
      if (asset !== undefined) {
        route = "asset";
        return reply.send(200, asset.body, {
          "content-type": asset.type,
          "cache-control": "public, max-age=300",
          "access-control-allow-origin": "*",
        });
      }
      switch (req.path) {
        case "/healthz":
          route = "healthz";
          return reply.json(200, { status: "ok" }, NO_STORE);
        case "/readyz":
          route = "readyz";
          return this.#o.isReady()
            ? reply.json(200, { status: "ready" }, NO_STORE)
            : reply.json(503, { status: "not_ready" }, NO_STORE);
        case "/metrics":
          route = "metrics";
          return reply.send(200, await this.#o.registry.metrics(), {
            "content-type": this.#o.registry.contentType,
          });
        case "/demo/like":
          route = "demo";
          if (this.#o.demoPage !== undefined && req.method === "POST") return await this.#demoLike(reply);
          break;
      }
      const m = PAGE_COUNTER.exec(req.path);
      if (m !== null) {
        route = "page_counter";
        const page = decodePathSegment(m[1]!);
        if (!isPageId(page)) throw new ProtocolError("invalid_page");
        if (req.method === "GET") return await this.#read(reply, page);
        if (req.method === "PUT") return await this.#change(reply, req, page);
        throw new ProtocolError("method_not_allowed", `${req.method} is not allowed here; use GET or PUT`);
      }
      throw new ProtocolError("not_found", `no route for ${req.method} ${req.path}`);
    } catch (err) {
      const e = err instanceof ProtocolError ? err : new ProtocolError("internal", undefined, { cause: err });
      if (e.code === "internal") this.#o.logger.error({ err, path: req.path }, "http request failed");
      status = e.status;
      reply.error(e, e.retryable ? { ...NO_STORE, "retry-after": "1" } : NO_STORE);
    } finally {
      this.#o.metrics.httpRequests.inc({ route, status: String(status) });
    }
  }

  async #read(reply: Reply, page: string): Promise<void> {
    const state = (await this.#o.owners.request(partitionOf(page, this.#o.partitions), {
      type: "snapshot",
      page,
    })) as PageStateReply;
    const live = new Set(state.liveDcs);
    const counters: Array<[string, number]> = [];
    let viewers = 0;
    for (const [name, entries] of Object.entries(state.counters)) {
      let value = 0;
      for (const [dc, e] of Object.entries(entries))
        if (name !== VIEWERS_COUNTER || live.has(dc)) value += e.p - e.n;
      if (name === VIEWERS_COUNTER) viewers = Math.max(0, value);
      else counters.push([name, value]);
    }
    // fromEntries defines own properties, so a counter named "__proto__" stays a counter.
    const body: CounterReadBody = {
      page,
      count: viewers,
      viewers,
      counters: Object.fromEntries(counters),
      updated_at: state.ts,
    };
    reply.json(200, body, NO_STORE);
  }

  async #change(reply: Reply, req: RequestInfo, page: string): Promise<void> {
    this.#authorize(req);
    const key = req.headers["idempotency-key"] ?? randomUUID();
    if (!isViewerId(key)) throw new ProtocolError("invalid_idempotency_key");
    const body = parseJson(await readBody(reply, this.#o.maxBodyBytes));
    const { counter, delta } = parseChange(body);
    const result = await this.#increment(page, counter, delta, key);
    reply.json(
      200,
      { page, counter, value: result.value, updated_at: result.updatedAt },
      result.duplicate ? { ...NO_STORE, "idempotent-replayed": "true" } : NO_STORE,
    );
  }

  async #demoLike(reply: Reply): Promise<void> {
    await readBody(reply, this.#o.maxBodyBytes);
    const page = this.#o.demoPage!;
    const result = await this.#increment(page, "likes", 1, randomUUID());
    reply.json(200, { page, counter: "likes", value: result.value, updated_at: result.updatedAt }, NO_STORE);
  }

  #increment(page: string, counter: string, delta: number, key: string): Promise<IncrementReply> {
    return this.#o.owners.request(partitionOf(page, this.#o.partitions), {
      type: "increment",
      page,
      counter,
      delta,
      key,
    }) as Promise<IncrementReply>;
  }

  /** Bearer key check in constant time: every configured key is compared, by digest. */
  #authorize(req: RequestInfo): void {
    const header = req.headers.authorization ?? "";
    const m = /^Bearer ([\x21-\x7e]+)$/.exec(header);
    if (m === null)
      throw new ProtocolError("unauthorized", "Authorization: Bearer <publisher key> is required");
    const digest = createHash("sha256").update(m[1]!).digest();
    let ok = false;
    for (const known of this.#keyDigests) ok = timingSafeEqual(digest, known) || ok;
    if (!ok) throw new ProtocolError("unauthorized", "unknown publisher key");
  }
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
