import { ProtocolError } from "@livecount/protocol";
import type { HttpRequest, HttpResponse } from "uWebSockets.js";

/**
 * Small helpers over uWS HTTP: a response that knows whether it was aborted, a bounded body reader,
 * and JSON replies. uWS requires onAborted before any asynchronous step and cork around late writes.
 */
export class Reply {
  aborted = false;
  /** Added to whatever this reply sends (e.g. CORS for public reads). */
  common: Readonly<Record<string, string>> = {};
  /** Close the connection after this reply (a client over its request budget). */
  closeConnection = false;
  /**
   * The request came with a body that may be long (chunked, or declared past UNREAD_BODY_BYTES) and
   * no route has begun to read it (`readBody`). uWS would read and drop such a body after the
   * answer, however long it is, so the answer closes the connection. A shorter one is dropped on
   * the kept connection: closing would cost a client that sent it a new connection, and may reset
   * the answer under a body still arriving.
   */
  unreadBody = false;
  /**
   * Called once when the client goes away before the response ended: what a response that stays
   * open (an event stream) holds is released here. uWS takes one abort handler per response, this
   * reply's.
   */
  onAbort: (() => void) | undefined;
  /** Whether a response was sent: the first one stands (a stopping gateway may answer before a route). */
  #sent = false;

  get sent(): boolean {
    return this.#sent;
  }
  /** `head`: the request was HEAD; replies carry the status and headers of a GET, and no body. */
  constructor(
    readonly res: HttpResponse,
    readonly head = false,
  ) {
    res.onAborted(() => {
      this.aborted = true;
      this.onAbort?.();
    });
  }

  json(status: number, body: unknown, headers: Readonly<Record<string, string>> = NO_HEADERS): void {
    this.#send(status, JSON.stringify(body), JSON_TYPE, headers);
  }

  /** An error body; a 426 also names what to upgrade to (UPGRADE_REQUIRED_HEADERS), wherever it comes from. */
  error(err: ProtocolError, headers: Readonly<Record<string, string>> = {}): void {
    const all = err.code === "upgrade_required" ? { ...headers, ...UPGRADE_REQUIRED_HEADERS } : headers;
    this.json(err.status, { error: { code: err.code, message: err.message } }, all);
  }

  /**
   * Closes the connection without an answer. An answer that asks to close it does not stop uWS from
   * answering the requests already read behind it on the connection, which are then answered too.
   */
  drop(): void {
    if (this.aborted || this.#sent) return;
    this.#sent = true;
    this.res.close();
  }

  send(status: number, body: string | Uint8Array, headers: Readonly<Record<string, string>>): void {
    this.#send(status, body, NO_HEADERS, headers);
  }

  /** Writes `common`, then `first`, then `headers`; a later one's value wins for a name they share. */
  #send(
    status: number,
    body: string | Uint8Array,
    first: Readonly<Record<string, string>>,
    headers: Readonly<Record<string, string>>,
  ): void {
    if (this.aborted || this.#sent) return;
    this.#sent = true;
    if (this.unreadBody) this.closeConnection = true;
    this.res.cork(() => {
      this.res.writeStatus(STATUS_TEXT[status] ?? String(status));
      for (const k in this.common)
        if (!Object.hasOwn(first, k) && !Object.hasOwn(headers, k)) this.res.writeHeader(k, this.common[k]!);
      for (const k in first) if (!Object.hasOwn(headers, k)) this.res.writeHeader(k, first[k]!);
      for (const k in headers) this.res.writeHeader(k, headers[k]!);
      if (!this.head) {
        this.res.end(body, this.closeConnection);
        return;
      }
      // The length the GET would carry, written by hand: uWS's endWithoutBody(length) leaves the
      // response unfinished in this build (and the process aborts); endWithoutBody() does not.
      const length = typeof body === "string" ? Buffer.byteLength(body) : body.byteLength;
      this.res.writeHeader("content-length", String(length));
      // endWithoutBody with arguments aborts the process in this uWS build: a HEAD that must close
      // its connection is closed without an answer instead.
      if (this.closeConnection) this.res.close();
      else this.res.endWithoutBody();
    });
  }
}

/** The WebSocket version of RFC 6455, the only one the gateway speaks. */
export const WEBSOCKET_VERSION = "13";

/**
 * What a 426 names (RFC 6455 4.4, RFC 9110 15.5.22): the protocol to upgrade to, and its version;
 * a sender of Upgrade also names it in Connection (RFC 9110 7.8).
 */
const UPGRADE_REQUIRED_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  upgrade: "websocket",
  connection: "upgrade",
  "sec-websocket-version": WEBSOCKET_VERSION,
});

const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({});
const JSON_TYPE: Readonly<Record<string, string>> = Object.freeze({ "content-type": "application/json" });

const STATUS_TEXT: Readonly<Record<number, string>> = {
  200: "200 OK",
  204: "204 No Content",
  400: "400 Bad Request",
  401: "401 Unauthorized",
  403: "403 Forbidden",
  404: "404 Not Found",
  405: "405 Method Not Allowed",
  409: "409 Conflict",
  413: "413 Payload Too Large",
  426: "426 Upgrade Required",
  429: "429 Too Many Requests",
  500: "500 Internal Server Error",
  503: "503 Service Unavailable",
  504: "504 Gateway Timeout",
};

/**
 * Reads the whole body, rejecting with payload_too_large past `limit` bytes. A body past the limit
 * is still read to its end and dropped, so the 413 leaves the connection usable, but only up to the
 * limit again: past twice the limit the 413 closes the connection, and the rest is never read (a
 * client that streams on may see the connection reset before it reads the answer).
 */
export function readBody(reply: Reply, limit: number): Promise<Buffer> {
  reply.unreadBody = false;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    reply.res.onData((chunk, isLast) => {
      if (settled) return;
      size += chunk.byteLength;
      if (size > limit) {
        if (size > 2 * limit) reply.closeConnection = true;
        else if (!isLast) return;
        settled = true;
        reject(new ProtocolError("payload_too_large", `body exceeds ${limit} bytes`));
        return;
      }
      // uWS reuses the chunk's memory after this callback returns: copy it (once).
      chunks.push(Buffer.from(chunk.slice(0)));
      if (isLast) {
        settled = true;
        resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
      }
    });
  });
}

/**
 * The longest body uWS may read and drop after an answer that did not read it, on a kept
 * connection: a change's largest (protocol v1's 64 KiB), which the SDK's batches stay under too.
 */
export const UNREAD_BODY_BYTES = 64 * 1024;

/** Rejects malformed UTF-8; holds no state between calls, so one serves every request. */
const UTF8 = new TextDecoder("utf-8", { fatal: true });

/** Parses a JSON body, rejecting with invalid_body. */
export function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(UTF8.decode(body));
  } catch (err) {
    throw new ProtocolError("invalid_body", "body is not valid JSON", { cause: err });
  }
}

/** Everything a route needs from the request, read synchronously (uWS requests die at the first await). */
export interface RequestInfo {
  /** Upper case; HEAD is routed as GET (see `head`). */
  readonly method: string;
  /** The request was HEAD: answered as a GET without its body. */
  readonly head: boolean;
  readonly path: string;
  readonly query: string;
  /**
   * The headers routes read (WANTED_HEADERS), lowercase; absent or empty ones are missing, but an
   * empty Idempotency-Key of a change, which is "" (an invalid key, not none).
   */
  readonly headers: Readonly<Record<string, string>>;
  /**
   * The client's address (after LIVECOUNT_TRUSTED_PROXIES), resolved when first read: a request
   * with a key never needs it. Read it before the route's first await (the response may be aborted
   * by then); routes that need it do.
   */
  readonly address: string;
  /** Why the body's length is ambiguous (`ambiguousLength`): the connection is closed unanswered. */
  readonly ambiguous: string | undefined;
  /** The request has a body: a `Content-Length` other than 0, or a `Transfer-Encoding`. */
  readonly hasBody: boolean;
  /** Of those, a body chunked or declared past UNREAD_BODY_BYTES: unread, it closes the connection. */
  readonly longBody: boolean;
}

const WANTED_HEADERS = [
  "authorization",
  "idempotency-key",
  "content-type",
  "origin",
  "host",
  "sec-fetch-site",
] as const;

/**
 * Why the request's body length is ambiguous, or undefined: Content-Length headers (or values of
 * one) that differ, or Content-Length beside Transfer-Encoding. uWS takes the first Content-Length
 * header; a proxy in front that took another would see a request of its own where uWS sees body,
 * or the reverse (request smuggling). Such a request's connection is closed (RFC 9112, 6.3). uWS
 * refuses the last two itself; requests without either header, nearly every read, cost two lookups.
 */
export function ambiguousLength(req: HttpRequest): string | undefined {
  if (req.getHeader("content-length") === "" && req.getHeader("transfer-encoding") === "") return undefined;
  const lengths = new Set<string>();
  let transferEncoding = false;
  req.forEach((name, value) => {
    if (name === "content-length") for (const v of value.split(",")) lengths.add(v.trim());
    else if (name === "transfer-encoding") transferEncoding = true;
  });
  if (lengths.size > 1) return "Content-Length headers that differ";
  if (transferEncoding && lengths.size > 0) return "both Content-Length and Transfer-Encoding";
  return undefined;
}

/** `address` resolves the client's address; it is called once, when a route first reads it. */
export function requestInfo(req: HttpRequest, address: () => string): RequestInfo {
  const headers: Record<string, string> = {};
  for (const h of WANTED_HEADERS) {
    const v = req.getHeader(h);
    if (v !== "") headers[h] = v;
  }
  const method = req.getCaseSensitiveMethod().toUpperCase();
  // getHeader answers "" for an empty header and for none. An empty Idempotency-Key is a key, and
  // an invalid one: read as none, the change would get a key of the server's, and its retries
  // would count again.
  if (headers["idempotency-key"] === undefined && method !== "GET" && method !== "HEAD") {
    req.forEach((name) => {
      if (name === "idempotency-key") headers["idempotency-key"] = "";
    });
  }
  const contentLength = req.getHeader("content-length");
  const chunked = req.getHeader("transfer-encoding") !== "";
  const hasBody = chunked || (contentLength !== "" && contentLength !== "0");
  const longBody = chunked || (hasBody && !(Number(contentLength) <= UNREAD_BODY_BYTES));
  let resolved: string | undefined;
  return {
    method: method === "HEAD" ? "GET" : method,
    head: method === "HEAD",
    path: req.getUrl(),
    query: req.getQuery() ?? "",
    headers,
    get address(): string {
      return (resolved ??= address());
    },
    ambiguous: ambiguousLength(req),
    hasBody,
    longBody,
  };
}
