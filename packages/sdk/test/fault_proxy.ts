/**
 * A TCP proxy in front of a real gateway for the faults the SDK must ride out, and a witness of
 * what it sends: it records every HTTP request that passes (method, path, headers), can answer
 * requests itself (a 503 or 429 the server never saw), withhold answers (the change applied, the
 * client times out), and cut every open connection at once (a dropped WebSocket). Lost answers
 * are test/support/lossy_proxy.ts's job.
 */
import { connect, createServer, type Server, type Socket } from "node:net";

/** A request seen by the proxy: method, path with query, and the headers (lower-case names). */
export interface SeenRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
}

/** A response the proxy sends itself instead of forwarding the request. */
export interface CannedResponse {
  readonly status: number;
  readonly body: unknown;
  readonly headers?: Readonly<Record<string, string>>;
}

const REQUEST_LINE = /(GET|PUT|POST|DELETE|PATCH|HEAD|OPTIONS) (\S+) HTTP\/1\.1\r\n/g;
const HEAD_END = "\r\n\r\n";
/** Bytes kept between chunks so a request line split across two is still seen. */
const TAIL_BYTES = 2048;

export class FaultProxy {
  /** Every request that reached the proxy, in order (answered by the proxy itself or not). */
  readonly seen: SeenRequest[] = [];
  /** Client connections accepted so far. */
  connections = 0;
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  readonly #canned: CannedResponse[] = [];
  #stalls = 0;

  private constructor(server: Server) {
    this.#server = server;
  }

  /** Listens on 127.0.0.1 (free port) and forwards to `targetPort` on `targetHost`. */
  static async start(targetPort: number, targetHost = "127.0.0.1"): Promise<FaultProxy> {
    const server = createServer();
    const proxy = new FaultProxy(server);
    server.on("connection", (client) => proxy.#accept(client, targetHost, targetPort));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    return proxy;
  }

  get port(): number {
    const address = this.#server.address();
    return typeof address === "object" && address !== null ? address.port : 0;
  }

  /** http://127.0.0.1:<port> */
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** "METHOD /path?query" of every request seen, in order. */
  get requests(): string[] {
    return this.seen.map((r) => `${r.method} ${r.path}`);
  }

  /** Requests whose "METHOD /path" starts with `prefix`, e.g. "POST /v1/counters/increment". */
  count(prefix: string): number {
    return this.requests.filter((r) => r.startsWith(prefix)).length;
  }

  /** The next `n` requests get `response` from the proxy (and a closed connection); the server never sees them. */
  respondNext(n: number, response: CannedResponse): void {
    for (let i = 0; i < n; i++) this.#canned.push(response);
  }

  /** The next `n` responses are withheld: the requests reach the server, their answers never come back. */
  stallNext(n: number): void {
    this.#stalls += n;
  }

  /** Cuts every open connection without a close handshake, as a lost network would. */
  resetAll(): void {
    for (const s of this.#sockets) s.destroy();
  }

  async close(): Promise<void> {
    this.resetAll();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(client: Socket, host: string, port: number): void {
    this.connections++;
    const upstream = connect({ host, port });
    this.#sockets.add(client).add(upstream);
    let tail = "";
    /** A request went up and its response has not started yet. */
    let awaiting = false;
    /** Answers on this connection are withheld. */
    let stalled = false;
    let answered = false;
    const cut = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on("data", (chunk: Buffer) => {
      if (answered) return;
      const text = tail + chunk.toString("latin1");
      let end = 0;
      for (const m of text.matchAll(REQUEST_LINE)) {
        const headEnd = text.indexOf(HEAD_END, m.index);
        this.seen.push({
          method: m[1]!,
          path: m[2]!,
          headers: parseHeaders(text.slice(m.index + m[0].length, headEnd < 0 ? undefined : headEnd)),
        });
        end = m.index + m[0].length;
        const canned = this.#canned.shift();
        if (canned !== undefined) {
          answered = true;
          upstream.destroy();
          client.end(render(canned));
          return;
        }
      }
      tail = text.slice(Math.max(end, text.length - TAIL_BYTES));
      awaiting = true;
      upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      if (stalled) return;
      if (awaiting && this.#stalls > 0) {
        this.#stalls--;
        stalled = true;
        return;
      }
      awaiting = false;
      client.write(chunk);
    });
    client.on("end", () => upstream.end());
    upstream.on("end", () => client.end());
    for (const s of [client, upstream]) {
      s.on("error", cut);
      s.on("close", () => {
        this.#sockets.delete(s);
        cut();
      });
    }
  }
}

function parseHeaders(block: string): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const line of block.split("\r\n")) {
    const colon = line.indexOf(":");
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return headers;
}

function render(r: CannedResponse): string {
  const body = JSON.stringify(r.body);
  const headers = {
    "content-type": "application/json",
    "content-length": String(Buffer.byteLength(body)),
    connection: "close",
    ...r.headers,
  };
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}`);
  return [`HTTP/1.1 ${r.status} Injected`, ...lines, "", body].join("\r\n");
}
