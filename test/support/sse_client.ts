/**
 * A Server-Sent Events client for tests over plain HTTP (Node's `http` module, not EventSource), so
 * the tests see the wire: the status and headers, every event with its fields, every comment line,
 * and how the stream ended (cleanly, with the last chunk, or cut). It parses the stream itself
 * (text/event-stream, WHATWG HTML "Server-sent events") instead of using the SDK's parser.
 */
import { request, type IncomingHttpHeaders, type IncomingMessage } from "node:http";
import { eventually } from "./eventually.js";
import type { CountFrame } from "./ws_client.js";

export interface SseEvent {
  readonly event: string;
  readonly id: string | undefined;
  readonly data: string;
  /** Date.now() when it arrived. */
  readonly at: number;
}

export interface SseOptions {
  /** Loopback source address to connect from (127.0.0.x), to act as another client address. */
  readonly localAddress?: string;
  readonly headers?: Readonly<Record<string, string>>;
}

/** How a stream ended: "end" with its last chunk (the server ended it), "cut" without. */
export type SseEnd = "end" | "cut";

const DEFAULT_WAIT_MS = 5000;

export class SseClient {
  readonly events: SseEvent[] = [];
  /** Comment lines (without the colon), in order: the server's heartbeats. */
  readonly comments: string[] = [];
  /** Resolves when the response is over, however it ended. */
  readonly ended: Promise<SseEnd>;
  #buffer = "";
  #pending: { event: string; id: string | undefined; data: string[] } = {
    event: "",
    id: undefined,
    data: [],
  };

  private constructor(
    readonly res: IncomingMessage,
    readonly status: number,
    readonly headers: IncomingHttpHeaders,
  ) {
    res.setEncoding("utf8");
    res.on("data", (chunk: string) => this.#push(chunk));
    this.ended = new Promise((resolve) => {
      let complete = false;
      res.once("end", () => (complete = true));
      res.once("close", () => resolve(complete ? "end" : "cut"));
    });
    res.on("error", () => {});
  }

  /**
   * GETs `url` and resolves once the response head arrived: a stream to read when the status is
   * 200, the refusal otherwise (read its `body()`).
   */
  static open(url: string, options: SseOptions = {}): Promise<SseClient> {
    return new Promise((resolve, reject) => {
      const req = request(url, {
        headers: { accept: "text/event-stream", ...options.headers },
        ...(options.localAddress !== undefined ? { localAddress: options.localAddress } : {}),
        // Each stream its own connection, as a browser's EventSource holds one per stream.
        agent: false,
      });
      req.once("response", (res) => resolve(new SseClient(res, res.statusCode ?? 0, res.headers)));
      req.once("error", reject);
      req.end();
    });
  }

  /** The whole body of a refusal (JSON), once it ended. */
  async body(): Promise<unknown> {
    await this.ended;
    return JSON.parse(this.#buffer) as unknown;
  }

  /** The count frames received, in order. */
  get counts(): CountFrame[] {
    return this.events.filter((e) => e.event === "count").map((e) => JSON.parse(e.data) as CountFrame);
  }

  /** Waits for a count frame, received at or after index `from` of `counts`, that matches. */
  async nextCount(
    match: (f: CountFrame) => boolean = () => true,
    from = 0,
    timeoutMs = DEFAULT_WAIT_MS,
  ): Promise<CountFrame> {
    return eventually(
      () => {
        const found = this.counts.slice(from).find(match);
        if (found === undefined)
          throw new Error(`no matching count frame among ${JSON.stringify(this.counts.slice(from))}`);
        return found;
      },
      { timeoutMs, intervalMs: 5 },
    );
  }

  /** Cuts the connection, as a client that goes away does. */
  close(): void {
    this.res.destroy();
  }

  #push(chunk: string): void {
    this.#buffer += chunk;
    if (this.status !== 200) return;
    let newline: number;
    while ((newline = this.#buffer.indexOf("\n")) >= 0) {
      const line = this.#buffer.slice(0, newline).replace(/\r$/, "");
      this.#buffer = this.#buffer.slice(newline + 1);
      this.#line(line);
    }
  }

  #line(line: string): void {
    const p = this.#pending;
    if (line === "") {
      if (p.data.length > 0)
        this.events.push({ event: p.event || "message", id: p.id, data: p.data.join("\n"), at: Date.now() });
      this.#pending = { event: "", id: undefined, data: [] };
      return;
    }
    if (line.startsWith(":")) {
      this.comments.push(line.slice(1).trim());
      return;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") p.event = value;
    else if (field === "data") p.data.push(value);
    else if (field === "id") p.id = value;
  }
}
