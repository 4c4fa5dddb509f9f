import { ProtocolError } from "@livecount/protocol";
import type { Clock } from "@livecount/runtime";
import type { Reply, RequestInfo } from "./http_io.js";

const STOPPING = "the gateway is stopping; retry (with the same Idempotency-Key for a change)";
const REFUSED_HEADERS = { "cache-control": "no-store", "retry-after": "1" } as const;

/**
 * The HTTP requests a gateway is answering, so that a stop lets them finish instead of cutting
 * their connections: once a drain begins, a new request (on a connection kept alive) is refused with
 * 503 and its connection closed; those in progress get until the deadline; any still unanswered then
 * gets 503 too. A client is never left without an answer, and knows to retry: a change it retries
 * with its key counts once, whether or not the first try applied.
 */
export class HttpRequests {
  readonly #clock: Clock;
  /** The CORS headers a read from `origin` carries (OriginPolicy): a refused browser read sees its 503. */
  readonly #corsHeaders: (origin: string) => Readonly<Record<string, string>>;
  readonly #pending = new Set<Reply>();
  #draining = false;
  #idle: (() => void) | undefined;

  constructor(
    clock: Clock,
    corsHeaders: (origin: string) => Readonly<Record<string, string>>,
    /** A request closed unanswered (`RequestInfo.ambiguous`), for the metrics. */
    readonly onDropped: (reason: "ambiguous_length") => void = () => {},
  ) {
    this.#clock = clock;
    this.#corsHeaders = corsHeaders;
  }

  /** Requests being answered now. */
  get pending(): number {
    return this.#pending.size;
  }

  /** Answers `reply` (to `request`) with `handle`, or refuses it once a drain has begun. */
  serve(reply: Reply, request: RequestInfo, handle: () => Promise<void>): void {
    // Reads (the API's, assets, their errors) carry CORS for the allowed origins: set here, before
    // anything answers, so that a refusal too reaches a browser as one.
    if (request.method === "GET") reply.common = this.#corsHeaders(request.headers.origin ?? "");
    // What follows on the connection may be a request a proxy in front never sent: nothing of it
    // may be answered, and a 400 would not stop uWS from answering it (Reply.drop).
    if (request.ambiguous !== undefined) {
      reply.drop();
      this.onDropped("ambiguous_length");
      return;
    }
    if (this.#draining) {
      refuse(reply);
      return;
    }
    this.#pending.add(reply);
    void handle().finally(() => {
      this.#pending.delete(reply);
      if (this.#pending.size === 0) this.#idle?.();
    });
  }

  /**
   * Refuses new requests from now on and waits up to `timeoutMs` for those in progress, then answers
   * the rest 503. Resolves with how many it had to answer so.
   */
  async drain(timeoutMs: number): Promise<number> {
    this.#draining = true;
    if (this.#pending.size > 0) {
      await new Promise<void>((resolve) => {
        const timer = this.#clock.setTimeout(resolve, timeoutMs);
        this.#idle = () => {
          this.#clock.clearTimeout(timer);
          resolve();
        };
      });
    }
    this.#idle = undefined;
    // A reply sent whose route has not returned yet is not late.
    const late = [...this.#pending].filter((reply) => !reply.sent);
    for (const reply of late) refuse(reply);
    this.#pending.clear();
    return late.length;
  }
}

function refuse(reply: Reply): void {
  // Not for HEAD: uWS cannot end one and close (Reply), and the gateway closes it moments later.
  reply.closeConnection = !reply.head;
  reply.error(new ProtocolError("unavailable", STOPPING), REFUSED_HEADERS);
}
