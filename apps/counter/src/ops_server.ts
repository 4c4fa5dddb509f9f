import { createServer, type Server } from "node:http";
import { BearerKeys, bearerOf, type Logger } from "@livecount/runtime";
import type { Registry } from "prom-client";

/**
 * How long a connection may take to send a request's headers, and its whole request: probes and
 * scrapers send a line or two at once. Past them Node answers 408 and closes; it checks every
 * `CHECK_MS`, so a silent connection is gone within their sum.
 */
const HEADERS_TIMEOUT_MS = 5_000;
const REQUEST_TIMEOUT_MS = 10_000;
const CHECK_MS = 1_000;

/**
 * Health, readiness and metrics over plain HTTP for a process that serves nothing else. Metrics
 * need `Authorization: Bearer <LIVECOUNT_ADMIN_KEY>`; without an admin key they answer 401 to
 * everyone (and the server says so once at start). Health and readiness stay open for probes.
 * It holds at most `maxConnections` (LIVECOUNT_OPS_MAX_CONNECTIONS) at once, each for seconds.
 */
export async function startOpsServer(opts: {
  port: number;
  host?: string;
  registry: Registry;
  isReady: () => boolean;
  adminKey: string | undefined;
  logger: Logger;
  maxConnections: number;
  /** Tests shorten them. */
  timeouts?: { headersMs: number; requestMs: number; checkMs: number };
}): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const admin = new BearerKeys(opts.adminKey !== undefined ? [opts.adminKey] : []);
  if (opts.adminKey === undefined)
    opts.logger.warn("LIVECOUNT_ADMIN_KEY is not set: /metrics answers 401 to everyone");
  const timeouts = opts.timeouts ?? {
    headersMs: HEADERS_TIMEOUT_MS,
    requestMs: REQUEST_TIMEOUT_MS,
    checkMs: CHECK_MS,
  };
  const options = {
    headersTimeout: timeouts.headersMs,
    requestTimeout: timeouts.requestMs,
    connectionsCheckingInterval: timeouts.checkMs,
  };
  const server = createServer(options, (req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    const json = (status: number, body: unknown, headers: Record<string, string> = {}): void => {
      res
        .writeHead(status, { "content-type": "application/json", "cache-control": "no-store", ...headers })
        .end(JSON.stringify(body));
    };
    const known = path === "/healthz" || path === "/readyz" || path === "/metrics";
    // As on gateways: another method on a route is a 405 naming the ones it serves.
    if (known && req.method !== "GET" && req.method !== "HEAD") {
      const message = `${req.method ?? ""} is not allowed here; use GET`;
      return json(405, { error: { code: "method_not_allowed", message } }, { allow: "GET, HEAD" });
    }
    if (path === "/healthz") return json(200, { status: "ok" });
    if (path === "/readyz")
      return opts.isReady() ? json(200, { status: "ready" }) : json(503, { status: "not_ready" });
    if (path === "/metrics") {
      if (!admin.has(bearerOf(req.headers.authorization)))
        return json(401, {
          error: { code: "unauthorized", message: "Authorization: Bearer <admin key> is required" },
        });
      opts.registry.metrics().then(
        (text) =>
          res
            .writeHead(200, { "content-type": opts.registry.contentType, "cache-control": "no-store" })
            .end(text),
        () => json(500, { error: { code: "internal", message: "metrics failed" } }),
      );
      return;
    }
    json(404, { error: { code: "not_found", message: "not found" } });
  });
  server.maxConnections = opts.maxConnections;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host ?? "0.0.0.0", () => resolve());
  });
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : opts.port;
  return {
    server,
    port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
