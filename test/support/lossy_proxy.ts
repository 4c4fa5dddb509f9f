/**
 * A TCP proxy that loses answers, for exactly-once tests: requests always reach the server, and for
 * a chosen share of HTTP exchanges the proxy closes the client's connection right after the
 * server's response arrived, without passing it on. The server did the work; the client sees a
 * dropped connection and retries, as it would over a lossy link.
 *
 * An exchange starts with the client's first bytes after the previous response (keep-alive
 * connections carry several); the decision is taken once per exchange, at the first byte of the
 * response. Decisions come from the injected `random`, so a seeded run is repeatable.
 */
import { createConnection, createServer, type Server, type Socket } from "node:net";

export interface LossyProxyOptions {
  /** Share of exchanges whose response is dropped, 0..1. */
  readonly dropShare: number;
  /** Uniform in [0, 1); default Math.random. */
  readonly random?: () => number;
}

export class LossyProxy {
  /** Exchanges whose response was dropped / passed on. */
  dropped = 0;
  forwarded = 0;
  dropShare: number;
  /** The next this many responses are dropped whatever the random draw says. */
  dropNext = 0;
  readonly #server: Server;
  readonly #random: () => number;
  readonly #sockets = new Set<Socket>();

  private constructor(server: Server, options: LossyProxyOptions) {
    this.#server = server;
    this.dropShare = options.dropShare;
    this.#random = options.random ?? Math.random;
  }

  /** Listens on a free port of 127.0.0.1 and forwards to `port` on `host`. */
  static async start(
    target: { host: string; port: number },
    options: LossyProxyOptions,
  ): Promise<LossyProxy> {
    const server = createServer();
    const proxy = new LossyProxy(server, options);
    server.on("connection", (client) => proxy.#pipe(client, target));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  get url(): string {
    const address = this.#server.address();
    if (address === null || typeof address === "string") throw new Error("proxy is not listening");
    return `http://127.0.0.1:${address.port}`;
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #pipe(client: Socket, target: { host: string; port: number }): void {
    const upstream = createConnection(target);
    for (const s of [client, upstream]) {
      this.#sockets.add(s);
      s.on("error", () => s.destroy());
      s.on("close", () => {
        this.#sockets.delete(s);
        (s === client ? upstream : client).destroy();
      });
    }
    /** Undecided: the current exchange's response has not started yet. */
    let decided = false;
    client.on("data", (chunk) => {
      decided = false;
      upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      if (!decided) {
        decided = true;
        const forced = this.dropNext > 0;
        if (forced) this.dropNext--;
        if (forced || this.#random() < this.dropShare) {
          this.dropped++;
          client.destroy();
          upstream.destroy();
          return;
        }
        this.forwarded++;
      }
      client.write(chunk);
    });
  }
}
