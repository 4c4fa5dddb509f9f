/**
 * A real HTTP receiver of occupancy webhooks for tests (node:http on a free port): records every
 * request with its raw body and headers, answers 200 or what a test asks for, can hold its answers
 * (a slow receiver), and can go down and come back on the same port.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { WebhookBody } from "@livecount/counter";
import { eventually } from "./eventually.js";

/** The body of an occupancy webhook (docs/protocol.md, "Webhooks"). */
export type HookBody = WebhookBody;

export interface ReceivedHook {
  readonly raw: string;
  readonly body: HookBody;
  readonly headers: IncomingHttpHeaders;
  /** When it arrived (Date.now()). */
  readonly at: number;
  /** What the receiver answered (undefined while held). */
  status: number | undefined;
}

/** Whether `header` is `sha256=` and the hex HMAC-SHA256 of `raw` with `secret`, compared in constant time. */
export function validSignature(raw: string, header: string | string[] | undefined, secret: string): boolean {
  if (typeof header !== "string") return false;
  const expected = Buffer.from(`sha256=${createHmac("sha256", secret).update(raw).digest("hex")}`);
  const given = Buffer.from(header);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

export class WebhookReceiver {
  readonly received: ReceivedHook[] = [];
  /** Requests whose answer is being held (see `hold`), in arrival order. */
  readonly #held: Array<() => void> = [];
  #holding = false;
  /** Statuses for the next requests, in order; 200 once they are used up. */
  #answers: number[] = [];
  #open = 0;
  /** The most requests that were open at once. */
  maxOpen = 0;
  #server: Server;
  #port = 0;

  private constructor() {
    this.#server = this.#createServer();
  }

  static async start(): Promise<WebhookReceiver> {
    const receiver = new WebhookReceiver();
    await receiver.#listen(0);
    return receiver;
  }

  /** The URL to give LIVECOUNT_WEBHOOK_URL. */
  get url(): string {
    return `http://127.0.0.1:${this.#port}/hooks`;
  }

  /** The next requests are answered with these statuses, in order, then 200 again. */
  answerNext(...statuses: number[]): void {
    this.#answers.push(...statuses);
  }

  /** Requests are recorded but not answered until `release`. */
  hold(): void {
    this.#holding = true;
  }

  /** Answers every held request, and the later ones at once. */
  release(): void {
    this.#holding = false;
    for (const answer of this.#held.splice(0)) answer();
  }

  /** Goes down: the port refuses connections until `restart`. */
  async stop(): Promise<void> {
    this.release();
    await new Promise<void>((resolve) => {
      this.#server.close(() => resolve());
      this.#server.closeAllConnections();
    });
  }

  /** Comes back on the same port. */
  async restart(): Promise<void> {
    this.#server = this.#createServer();
    await this.#listen(this.#port);
  }

  /** The bodies answered with a 2xx, in arrival order, of one page or of all. */
  delivered(page?: string): HookBody[] {
    return this.received
      .filter((r) => r.status !== undefined && r.status >= 200 && r.status < 300)
      .map((r) => r.body)
      .filter((b) => page === undefined || b.page === page);
  }

  /** Every request of one page, in arrival order. */
  requests(page: string): ReceivedHook[] {
    return this.received.filter((r) => r.body.page === page);
  }

  /** Waits until `count` events of `page` were delivered, and returns them. */
  async waitForDelivered(page: string, count: number, timeoutMs = 10_000): Promise<HookBody[]> {
    return eventually(
      () => {
        const bodies = this.delivered(page);
        if (bodies.length < count)
          throw new Error(`${page}: ${bodies.length} of ${count} delivered: ${JSON.stringify(bodies)}`);
        return bodies;
      },
      { timeoutMs },
    );
  }

  #createServer(): Server {
    return createServer((req, res) => {
      const chunks: Buffer[] = [];
      this.#open++;
      this.maxOpen = Math.max(this.maxOpen, this.#open);
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        const raw = Buffer.concat(chunks).toString("utf8");
        const hook: ReceivedHook = {
          raw,
          body: JSON.parse(raw) as HookBody,
          headers: req.headers,
          at: Date.now(),
          status: undefined,
        };
        this.received.push(hook);
        const answer = () => this.#answer(res, hook);
        if (this.#holding) this.#held.push(answer);
        else answer();
      });
    });
  }

  #answer(res: ServerResponse, hook: ReceivedHook): void {
    hook.status = this.#answers.shift() ?? 200;
    this.#open--;
    res.writeHead(hook.status, { "content-type": "text/plain" }).end("ok");
  }

  async #listen(port: number): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once("error", reject);
      this.#server.listen(port, "127.0.0.1", () => resolve());
    });
    this.#port = (this.#server.address() as AddressInfo).port;
  }
}
