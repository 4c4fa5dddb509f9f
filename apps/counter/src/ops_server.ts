import { createServer, type Server } from "node:http";
import type { Registry } from "prom-client";

/** Health, readiness and metrics over plain HTTP for a process that serves nothing else. */
export async function startOpsServer(opts: {
  port: number;
  host?: string;
  registry: Registry;
  isReady: () => boolean;
}): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    const json = (status: number, body: unknown): void => {
      res
        .writeHead(status, { "content-type": "application/json", "cache-control": "no-store" })
        .end(JSON.stringify(body));
    };
    if (path === "/healthz") return json(200, { status: "ok" });
    if (path === "/readyz")
      return opts.isReady() ? json(200, { status: "ready" }) : json(503, { status: "not_ready" });
    if (path === "/metrics") {
      opts.registry.metrics().then(
        (text) => res.writeHead(200, { "content-type": opts.registry.contentType }).end(text),
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
