/**
 * A protocol v1 client for tests over a real WebSocket (the `ws` package). It decodes server frames
 * itself (JSON.parse for text, msgpackr for binary) instead of using the protocol package, so the
 * tests check the wire format, and records every frame it receives with the time and the frame
 * kind, so a test can assert on the whole sequence (no dip, no duplicate) and not just the end.
 */
import { unpack, pack } from "msgpackr";
import WebSocket from "ws";
import { eventually } from "./eventually.js";

export type WireEncoding = "json" | "msgpack";

export interface CountFrame {
  readonly type: "count";
  readonly page: string;
  readonly viewers: number;
  /** Viewers with an active socket on the page (a visible tab). */
  readonly active?: number;
  /** Open sockets joined to the page. */
  readonly connections?: number;
  readonly counters: Readonly<Record<string, number>>;
  readonly ts: number;
  /** Data centers whose entries make up the value (multi-DC deployments). */
  readonly dcs?: readonly string[];
  /** How stale the oldest contributing data center may be, in ms. */
  readonly lag_ms?: number;
}

/** Negotiated with the `livecount.counts` subprotocol: every changed page of the socket at once. */
export interface CountsFrame {
  readonly type: "counts";
  readonly ts: number;
  readonly pages: Readonly<Record<string, Omit<CountFrame, "type" | "page" | "ts">>>;
}

export interface ErrorFrame {
  readonly type: "error";
  readonly code: string;
  readonly message: string;
  readonly page?: string;
}

export interface PongFrame {
  readonly type: "pong";
}

export type ServerFrame = CountFrame | CountsFrame | ErrorFrame | PongFrame;

export interface Received {
  readonly frame: ServerFrame;
  /** Whether the frame came as a binary (msgpack) WebSocket message. */
  readonly binary: boolean;
  /** Date.now() when it arrived. */
  readonly at: number;
}

export interface CloseEvent {
  readonly code: number;
  readonly reason: string;
  readonly at: number;
}

export interface ClientOptions {
  /** How this client encodes what it sends; default json. */
  readonly encoding?: WireEncoding;
  /** Loopback source address to connect from (127.0.0.x), to act as another client address. */
  readonly localAddress?: string;
  /** Extra upgrade request headers (Origin, X-Forwarded-For). */
  readonly headers?: Readonly<Record<string, string>>;
  /** For wss://: the PEM certificate to trust (a test's self-signed one). */
  readonly ca?: string;
  /** WebSocket subprotocols to offer (`Sec-WebSocket-Protocol`), e.g. `livecount.counts`. */
  readonly protocols?: readonly string[];
}

/** How long a client waits for something it expects by default. */
const DEFAULT_WAIT_MS = 5000;

export class TestClient {
  readonly received: Received[] = [];
  readonly encoding: WireEncoding;
  /** Resolves when the socket is closed, by either side. */
  readonly closed: Promise<CloseEvent>;
  #close: CloseEvent | undefined;

  private constructor(
    readonly ws: WebSocket,
    encoding: WireEncoding,
  ) {
    this.encoding = encoding;
    ws.on("message", (data, isBinary) => {
      const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      const frame = (isBinary ? unpack(bytes) : JSON.parse(bytes.toString("utf8"))) as ServerFrame;
      this.received.push({ frame, binary: isBinary, at: Date.now() });
    });
    this.closed = new Promise((resolve) => {
      ws.once("close", (code, reason) => {
        this.#close = { code, reason: reason.toString("utf8"), at: Date.now() };
        resolve(this.#close);
      });
    });
    // A refused or reset connection must not crash the test process; `closed` reports it.
    ws.on("error", () => {});
  }

  /** Opens a socket to `url` (ws://host:port/ws) and resolves once it is open. */
  static async connect(url: string, options: ClientOptions = {}): Promise<TestClient> {
    const { localAddress, headers, ca, protocols } = options;
    const ws = new WebSocket(url, protocols === undefined ? [] : [...protocols], {
      ...(localAddress !== undefined ? { localAddress } : {}),
      ...(headers !== undefined ? { headers: { ...headers } } : {}),
      ...(ca !== undefined ? { ca } : {}),
    });
    const client = new TestClient(ws, options.encoding ?? "json");
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
    });
    return client;
  }

  /** The close event, once the socket is closed. */
  get closeEvent(): CloseEvent | undefined {
    return this.#close;
  }

  get isOpen(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  /** Sends a frame in this client's encoding (JSON text or msgpack binary). */
  send(frame: Readonly<Record<string, unknown>>): void {
    if (this.encoding === "json") this.ws.send(JSON.stringify(frame));
    else this.ws.send(pack(frame), { binary: true });
  }

  /** Sends bytes as they are: text for a string, binary for a Buffer. */
  sendRaw(data: string | Buffer): void {
    this.ws.send(data, { binary: typeof data !== "string" });
  }

  join(page: string, viewer?: string): void {
    this.send(viewer === undefined ? { type: "join", page } : { type: "join", page, viewer });
  }

  leave(page: string): void {
    this.send({ type: "leave", page });
  }

  watch(page: string): void {
    this.send({ type: "watch", page });
  }

  unwatch(page: string): void {
    this.send({ type: "unwatch", page });
  }

  /** Every counts frame received, in order. */
  countsFrames(): CountsFrame[] {
    const out: CountsFrame[] = [];
    for (const r of this.received) if (r.frame.type === "counts") out.push(r.frame);
    return out;
  }

  /** Every count frame received for `page`, in order. */
  counts(page: string): CountFrame[] {
    const out: CountFrame[] = [];
    for (const r of this.received) if (r.frame.type === "count" && r.frame.page === page) out.push(r.frame);
    return out;
  }

  /** The `viewers` of every count frame received for `page`, in order. */
  viewerHistory(page: string): number[] {
    return this.counts(page).map((f) => f.viewers);
  }

  /** The latest count frame for `page`, if any. */
  lastCount(page: string): CountFrame | undefined {
    return this.counts(page).at(-1);
  }

  errors(): ErrorFrame[] {
    const out: ErrorFrame[] = [];
    for (const r of this.received) if (r.frame.type === "error") out.push(r.frame);
    return out;
  }

  /** Waits for a frame received at or after index `from` that matches, and returns it. */
  async next<T extends ServerFrame>(
    match: (f: ServerFrame) => f is T,
    from?: number,
    timeoutMs?: number,
  ): Promise<T>;
  async next(match: (f: ServerFrame) => boolean, from?: number, timeoutMs?: number): Promise<ServerFrame>;
  async next(
    match: (f: ServerFrame) => boolean,
    from = 0,
    timeoutMs = DEFAULT_WAIT_MS,
  ): Promise<ServerFrame> {
    return eventually(
      () => {
        for (let i = from; i < this.received.length; i++)
          if (match(this.received[i]!.frame)) return this.received[i]!.frame;
        throw new Error(
          `no matching frame among ${this.received.length - from}: ${JSON.stringify(this.received.slice(from, from + 5).map((r) => r.frame))}`,
        );
      },
      { timeoutMs, intervalMs: 5 },
    );
  }

  /** Waits until the latest count frame for `page` says `viewers`, and returns it. */
  async waitForViewers(page: string, viewers: number, timeoutMs = DEFAULT_WAIT_MS): Promise<CountFrame> {
    return eventually(
      () => {
        const last = this.lastCount(page);
        if (last?.viewers !== viewers)
          throw new Error(`page ${page}: viewers ${String(last?.viewers)}, want ${viewers}`);
        return last;
      },
      { timeoutMs, intervalMs: 5 },
    );
  }

  /** Waits until the latest count frame for `page` carries every value of `want`, and returns it. */
  async waitForCount(
    page: string,
    want: { readonly viewers?: number; readonly active?: number; readonly connections?: number },
    timeoutMs = DEFAULT_WAIT_MS,
  ): Promise<CountFrame> {
    return eventually(
      () => {
        const last = this.lastCount(page);
        for (const [key, value] of Object.entries(want)) {
          if (last?.[key as keyof typeof want] !== value)
            throw new Error(`page ${page}: ${JSON.stringify(last)}, want ${JSON.stringify(want)}`);
        }
        return last!;
      },
      { timeoutMs, intervalMs: 5 },
    );
  }

  /** Waits for the next error frame (received at or after index `from`). */
  async nextError(from = this.received.length, timeoutMs = DEFAULT_WAIT_MS): Promise<ErrorFrame> {
    return this.next((f): f is ErrorFrame => f.type === "error", from, timeoutMs);
  }

  /** Round trip: sends a ping and waits for its pong; proves the socket is open and served. */
  async ping(timeoutMs = DEFAULT_WAIT_MS): Promise<void> {
    const from = this.received.length;
    this.send({ type: "ping" });
    await this.next((f) => f.type === "pong", from, timeoutMs);
  }

  /** Closes with a close frame and waits until the socket is closed. */
  async close(code = 1000): Promise<CloseEvent> {
    if (this.ws.readyState === WebSocket.CONNECTING || this.ws.readyState === WebSocket.OPEN)
      this.ws.close(code);
    return this.closed;
  }

  /** Drops the TCP connection without a close frame, as a crashed client or a lost network would. */
  async terminate(): Promise<CloseEvent> {
    this.ws.terminate();
    return this.closed;
  }
}
