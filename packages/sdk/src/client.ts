/**
 * The publisher client: counter changes that count exactly once, reads, prefix listings,
 * fire-and-forget batching and live subscriptions, over livecount's public protocol v1.
 */
import { retryOptions, type RetryOptions } from "./backoff.js";
import { BatchSender } from "./batch_sender.js";
import { ChangeQueue, MAX_CHANGE } from "./change_queue.js";
import type { ChangeOptions, ListOptions, LivecountClientOptions, ReadOptions } from "./client_options.js";
import {
  decodeCounterValue,
  decodeListing,
  decodeMany,
  decodePageCounters,
  decodeRaw,
  decodeResetValue,
  decodePageStats,
  decodeWindowValue,
} from "./decode.js";
import {
  ClientClosedError,
  InvalidRequestError,
  LivecountError,
  PartialFailureError,
  type ChangeItem,
  type FailedItem,
} from "./errors.js";
import { checkCounter, checkKey, checkPage, checkViewer, newIdempotencyKey } from "./ids.js";
import { EventStreams, type EventSourceConstructor } from "./event_streams.js";
import {
  RECONNECT_DEFAULTS,
  Subscriptions,
  type CountListener,
  type LiveValues,
  type SubscribeOptions,
  type WebSocketConstructor,
} from "./subscriptions.js";
import { Transport } from "./transport.js";
import type {
  CounterValue,
  IncrementItem,
  PageCounters,
  PageListing,
  PageStats,
  RawPage,
  ResetValue,
  WindowValue,
} from "./types.js";

/** The longest window `window()` may ask for, in seconds: a day (protocol v1). */
const MAX_WINDOW_S = 86_400;
/** Longest path and query a read puts in one URL before it splits into several requests. */
const MAX_URL_PATH = 2000;
/** Most pages the gateway reads in one `GET /v1/counters`. */
const MAX_READ_PAGES = 100;
/** A prefix for listings: 0..128 printable ASCII. */
const PREFIX = /^[\x21-\x7e]{0,128}$/;

const encodePage = encodeURIComponent;

export class LivecountClient {
  readonly #baseUrl: string;
  readonly #transport: Transport;
  readonly #retry: RetryOptions;
  readonly #queue: ChangeQueue;
  readonly #subs: LiveValues;
  readonly #batches: BatchSender;
  #closed = false;

  constructor(options: LivecountClientOptions) {
    let url: URL;
    try {
      url = new URL(options.baseUrl);
    } catch (err) {
      throw new TypeError(`baseUrl is not a URL: ${options.baseUrl}`, { cause: err });
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError("baseUrl must be http(s)");
    this.#baseUrl = `${url.origin}${url.pathname.replace(/\/+$/, "")}`;
    if (options.publisherKey !== undefined && !/^[\x21-\x7e]{1,256}$/.test(options.publisherKey))
      throw new TypeError("publisherKey must be printable ASCII");
    const fetchFn = options.fetch ?? globalThis.fetch?.bind(globalThis);
    if (typeof fetchFn !== "function") throw new TypeError("no fetch implementation: pass the fetch option");
    const timeoutMs = options.timeoutMs ?? 10_000;
    if (!(timeoutMs > 0)) throw new RangeError("timeoutMs must be > 0");
    this.#retry = retryOptions(options.retry);
    this.#transport = new Transport(
      {
        baseUrl: this.#baseUrl,
        publisherKey: options.publisherKey,
        fetch: fetchFn,
        timeoutMs,
        retry: this.#retry,
      },
      options.onRetry,
    );
    const onError = options.onError ?? ((error: LivecountError) => console.error("livecount:", error));
    this.#batches = new BatchSender(this.#transport, this.#retry, options.queue?.maxBatchItems ?? 100);
    this.#queue = new ChangeQueue(options.queue ?? {}, (items) => this.#batches.send(items), onError);
    const reconnect = { ...RECONNECT_DEFAULTS, ...options.reconnect };
    const platform = globalThis as { WebSocket?: WebSocketConstructor; EventSource?: EventSourceConstructor };
    if (options.transport !== undefined && options.transport !== "websocket" && options.transport !== "sse")
      throw new TypeError('transport must be "websocket" or "sse"');
    this.#subs =
      options.transport === "sse"
        ? new EventStreams({
            baseUrl: this.#baseUrl,
            fetch: fetchFn,
            EventSource: options.EventSource ?? platform.EventSource,
            reconnect,
            onError,
          })
        : new Subscriptions({
            url: `${this.#baseUrl.replace(/^http/, "ws")}/ws`,
            WebSocket: options.WebSocket ?? platform.WebSocket,
            reconnect,
            onError,
          });
  }

  // ---- changes ------------------------------------------------------------------------------

  /**
   * Adds `by` (an integer from 1 to 10^9, default 1) to a counter, exactly once: the change
   * carries an idempotency key and every retry reuses it. Resolves once the change is durable.
   */
  increment(page: string, counter: string, by = 1, options: ChangeOptions = {}): Promise<CounterValue> {
    return this.#change("increment", page, counter, by, options);
  }

  /** Subtracts `by` (an integer from 1 to 10^9, default 1) from a counter, exactly once. Counters may go negative. */
  decrement(page: string, counter: string, by = 1, options: ChangeOptions = {}): Promise<CounterValue> {
    return this.#change("decrement", page, counter, by, options);
  }

  async #change(
    action: "increment" | "decrement",
    page: string,
    counter: string,
    by: number,
    options: ChangeOptions,
  ): Promise<CounterValue> {
    this.#checkOpen();
    checkPage(page);
    checkCounter(counter, page);
    if (!Number.isSafeInteger(by) || by < 1)
      throw new InvalidRequestError("invalid_body", `by must be a positive integer, got ${by}`, {
        status: 400,
        page,
      });
    const answer = await this.#transport.send({
      method: "PUT",
      path: `/v1/pages/${encodePage(page)}/counter`,
      body: { action, counter, by },
      auth: true,
      idempotencyKey: this.#key(options),
      signal: options.signal,
      page,
    });
    return decodeCounterValue(answer.body, answer.headers.get("idempotent-replayed") === "true");
  }

  /**
   * Resets a counter to zero by cancelling the value the page's owner observes (an observed
   * reset): increments made concurrently in other data centers survive it. For unread counts.
   * Exactly once by its idempotency key, like every change.
   */
  async reset(page: string, counter: string, options: ChangeOptions = {}): Promise<ResetValue> {
    return this.#counterAction("POST", page, counter, "/reset", options);
  }

  /**
   * Deletes a counter: a tombstone that replicates like any other write, so the counter
   * disappears from reads and count frames everywhere. A later increment starts it from zero.
   */
  async delete(page: string, counter: string, options: ChangeOptions = {}): Promise<ResetValue> {
    return this.#counterAction("DELETE", page, counter, "", options);
  }

  async #counterAction(
    method: "POST" | "DELETE",
    page: string,
    counter: string,
    suffix: string,
    options: ChangeOptions,
  ): Promise<ResetValue> {
    this.#checkOpen();
    checkPage(page);
    checkCounter(counter, page);
    const answer = await this.#transport.send({
      method,
      path: `/v1/pages/${encodePage(page)}/counters/${counter}${suffix}`,
      auth: true,
      idempotencyKey: this.#key(options),
      signal: options.signal,
      page,
    });
    return decodeResetValue(answer.body, answer.headers.get("idempotent-replayed") === "true");
  }

  /**
   * Applies many changes in as few requests as possible (`POST /v1/counters/increment`), each item
   * exactly once by its own idempotency key. Resolves with each item's value, in order. When some
   * items fail for good, rejects with a {@link PartialFailureError} listing them with their keys
   * (the others are durable): passing those items again can never count one twice.
   */
  async incrementMany(items: readonly IncrementItem[], options: ReadOptions = {}): Promise<CounterValue[]> {
    this.#checkOpen();
    const changes: ChangeItem[] = items.map((it) => {
      checkPage(it.page);
      checkCounter(it.counter, it.page);
      if (!Number.isSafeInteger(it.change) || it.change === 0 || Math.abs(it.change) > MAX_CHANGE)
        throw new InvalidRequestError(
          "invalid_body",
          `change must be a non-zero integer within ±${MAX_CHANGE}`,
          {
            status: 400,
            page: it.page,
          },
        );
      return {
        page: it.page,
        counter: it.counter,
        change: it.change,
        id: it.id === undefined ? newIdempotencyKey() : checkKey(it.id),
      };
    });
    const results = await this.#batches.send(changes, options.signal);
    const failed: FailedItem[] = [];
    results.forEach((r, i) => r instanceof LivecountError && failed.push({ item: changes[i]!, error: r }));
    if (failed.length > 0) throw new PartialFailureError(failed, "items");
    return results as CounterValue[];
  }

  /**
   * Fire-and-forget: adds `change` (a non-zero integer; negative decrements) to a counter without
   * waiting. Changes to the same counter within the queue's window (50 ms by default) are summed
   * into one item, and items go out in batches, each with its own idempotency key, retried with
   * that key. `flush()` waits until everything queued is durable; `close()` flushes first.
   * Items that fail for good go to `onError` and make the next `flush()` reject.
   *
   * Backpressure: throws {@link QueueFullError} (nothing queued) when `queue.maxPendingItems`
   * distinct counters are waiting; `await flush()` and queue again. Invalid ids throw at once.
   */
  queue(page: string, counter: string, change: number): void {
    this.#checkOpen();
    checkPage(page);
    checkCounter(counter, page);
    if (!Number.isSafeInteger(change) || Math.abs(change) > MAX_CHANGE)
      throw new InvalidRequestError("invalid_body", `change must be an integer within ±${MAX_CHANGE}`, {
        status: 400,
        page,
      });
    if (change !== 0) this.#queue.add(page, counter, change);
  }

  /** Resolves when every change queued so far is durable; see {@link LivecountClient.queue}. */
  flush(): Promise<void> {
    return this.#queue.flush();
  }

  /** Changes queued and not yet durable (distinct counters in the open window plus items in flight). */
  get pendingChanges(): number {
    return this.#queue.pending;
  }

  // ---- reads --------------------------------------------------------------------------------

  /**
   * The sum of a counter's changes over the last `seconds` (1..86,400), over every data center
   * (`GET /v1/pages/{page}/counters/{counter}/window`): minute buckets, so every minute the window
   * overlaps counts whole.
   */
  async window(
    page: string,
    counter: string,
    seconds: number,
    options: ReadOptions = {},
  ): Promise<WindowValue> {
    this.#checkOpen();
    checkPage(page);
    checkCounter(counter, page);
    if (!Number.isSafeInteger(seconds) || seconds < 1 || seconds > MAX_WINDOW_S)
      throw new InvalidRequestError("invalid_query", `seconds must be an integer from 1 to ${MAX_WINDOW_S}`, {
        page,
      });
    return decodeWindowValue(
      await this.#readPage(page, `/counters/${counter}/window?seconds=${seconds}`, options),
    );
  }

  /** A page's viewers now, its peaks and its unique visitors (`GET /v1/pages/{page}/stats`). */
  async stats(page: string, options: ReadOptions = {}): Promise<PageStats> {
    this.#checkOpen();
    checkPage(page);
    return decodePageStats(await this.#readPage(page, "/stats", options));
  }

  /**
   * A page's viewers and durable counters, read from the page's owner (never a cache), with the
   * data centers they come from (`dcs`, `lagMs`).
   */
  async get(page: string, options: ReadOptions = {}): Promise<PageCounters> {
    this.#checkOpen();
    checkPage(page);
    return decodePageCounters(await this.#readPage(page, "/counter", options));
  }

  /** The JSON body of a read of one page: `GET /v1/pages/{page}` and `rest`. */
  async #readPage(page: string, rest: string, options: ReadOptions): Promise<unknown> {
    const answer = await this.#transport.send({
      method: "GET",
      path: `/v1/pages/${encodePage(page)}${rest}`,
      auth: true,
      signal: options.signal,
      page,
    });
    return answer.body;
  }

  /**
   * Several pages' values (each summed over data centers) by page id, like `get()` for each, in
   * as few requests as the gateway allows (100 pages and a 2000-character URL per request).
   */
  async getMany(pages: readonly string[], options: ReadOptions = {}): Promise<Map<string, PageCounters>> {
    const bodies = await this.#readPages(pages, {}, options);
    return new Map(bodies.flatMap(decodeMany).map((p) => [p.page, p]));
  }

  /** Several pages' raw PN-counter entries: each data center's `{p, n}` per counter, by page id. */
  async getRaw(pages: readonly string[], options: ReadOptions = {}): Promise<Map<string, RawPage>> {
    const bodies = await this.#readPages(pages, { raw: "true" }, options);
    return new Map(bodies.flatMap(decodeRaw).map((p) => [p.page, p]));
  }

  async #readPages(
    pages: readonly string[],
    extra: Record<string, string>,
    options: ReadOptions,
  ): Promise<unknown[]> {
    this.#checkOpen();
    const unique = [...new Set(pages.map(checkPage))];
    const paths: string[] = [];
    let params = new URLSearchParams(extra);
    let count = 0;
    for (const page of unique) {
      const next = new URLSearchParams(params);
      next.append("page", page);
      if (count > 0 && (count >= MAX_READ_PAGES || next.toString().length > MAX_URL_PATH)) {
        paths.push(`/v1/counters?${params}`);
        params = new URLSearchParams(extra);
        params.append("page", page);
        count = 1;
      } else {
        params = next;
        count++;
      }
    }
    if (count > 0) paths.push(`/v1/counters?${params}`);
    const answers = await Promise.all(
      paths.map((path) => this.#transport.send({ method: "GET", path, auth: true, signal: options.signal })),
    );
    return answers.map((a) => a.body);
  }

  /**
   * One page of the pages whose id starts with `prefix` ("" lists all), with their values, in
   * byte order of their ids. Pass the answer's `cursor` to get the next; see {@link LivecountClient.listAll}.
   */
  async list(prefix: string, options: ListOptions = {}): Promise<PageListing> {
    this.#checkOpen();
    if (!PREFIX.test(prefix))
      throw new InvalidRequestError("invalid_query", "prefix must be 0..128 printable ASCII characters", {
        status: 400,
      });
    const params = new URLSearchParams({ prefix });
    if (options.limit !== undefined) params.set("limit", String(options.limit));
    if (options.cursor !== undefined) params.set("cursor", options.cursor);
    const answer = await this.#transport.send({
      method: "GET",
      path: `/v1/counters?${params}`,
      auth: true,
      signal: options.signal,
    });
    return decodeListing(answer.body);
  }

  /** Every page under `prefix` with its values, following cursors: `for await (const p of client.listAll("article-"))`. */
  async *listAll(
    prefix: string,
    options: Omit<ListOptions, "cursor"> = {},
  ): AsyncGenerator<PageCounters, void, undefined> {
    let cursor: string | undefined;
    do {
      const listing = await this.list(prefix, cursor === undefined ? options : { ...options, cursor });
      yield* listing.pages;
      cursor = listing.cursor;
    } while (cursor !== undefined);
  }

  // ---- live values --------------------------------------------------------------------------

  /**
   * Calls `listener` with the page's value now and whenever it changes (at most once per
   * coalescing window), over one WebSocket shared by all of this client's subscriptions, or with
   * `transport: "sse"` one event stream per page. Either reconnects by itself (full-jitter
   * backoff) and subscribes again. Returns the function that unsubscribes.
   */
  subscribe(page: string, listener: CountListener, options: SubscribeOptions = {}): () => void {
    this.#checkOpen();
    checkPage(page);
    if (options.viewer !== undefined) checkViewer(options.viewer);
    return this.#subs.subscribe(page, listener, options);
  }

  /** Sockets (or event streams) opened so far: the first ones plus reconnects; for diagnostics. */
  get connects(): number {
    return this.#subs.connects;
  }

  /**
   * Flushes the queue (rejecting like `flush()` if queued changes failed), closes the socket and
   * refuses further calls. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return this.#queue.flush();
    this.#closed = true;
    this.#subs.close();
    await this.#queue.flush();
  }

  // ---- internals ----------------------------------------------------------------------------

  #checkOpen(): void {
    if (this.#closed) throw new ClientClosedError();
  }

  #key(options: ChangeOptions): string {
    return options.idempotencyKey === undefined ? newIdempotencyKey() : checkKey(options.idempotencyKey);
  }
}
