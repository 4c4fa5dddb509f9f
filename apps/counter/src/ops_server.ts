import { createServer, type Server } from "node:http";
import { BearerKeys, bearerOf, type Logger } from "@livecount/runtime";
import type { Registry } from "prom-client";

/**
 * Health, readiness and metrics over plain HTTP for a process that serves nothing else. Metrics
 * need `Authorization: Bearer <LIVECOUNT_ADMIN_KEY>`; without an admin key they answer 401 to
 * everyone (and the server says so once at start). Health and readiness stay open for probes.
 */
export async function startOpsServer(opts: {
  port: number;
  host?: string;
  registry: Registry;
  isReady: () => boolean;
  adminKey: string | undefined;
  logger: Logger;
}): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const admin = new BearerKeys(opts.adminKey !== undefined ? [opts.adminKey] : []);
  if (opts.adminKey === undefined)
    opts.logger.warn("LIVECOUNT_ADMIN_KEY is not set: /metrics answers 401 to everyone");
  const server = createServer((req, res) => {
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
