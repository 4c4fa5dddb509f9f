/**
 * Server-Sent Events, `GET /v1/pages/{page}/events`. A stream watches one page as a socket's `watch`
 * does (it never counts as a viewer) and gets the page's count frames as `event: count`, encoded
 * once per page change and written as the same bytes to every stream of the page.
 *
 * A stream costs what a watching socket costs: a connection slot of its address (the sockets' quotas,
 * edge_guard.ts) and one page of its address's page budget (address_pages.ts). It gets a comment every
 * LIVECOUNT_SSE_HEARTBEAT_S, so proxies keep it open and a client that went away is found, and it
 * is closed past LIVECOUNT_MAX_BACKPRESSURE_BYTES unsent, like a socket. However it ends (the client
 * leaves, it reads too slowly, the gateway stops), what it holds is released by one teardown, `#end`.
 */
import { ProtocolError, encodeServerFrame } from "@livecount/protocol";
import type { Clock, TimerHandle } from "@livecount/runtime";
import type { HttpResponse } from "uWebSockets.js";
import type { AddressPages } from "./address_pages.js";
import type { EdgeGuard } from "./edge_guard.js";
import type { GatewayMetrics } from "./gateway_metrics.js";
import type { Reply, RequestInfo } from "./http_io.js";
import type { PageViews } from "./page_views.js";
import { RetryLaterError } from "./rate_limits.js";

export interface EventStreamsOptions {
  readonly views: PageViews;
  readonly guard: EdgeGuard;
  /** Pages per client address, shared with the sockets. */
  readonly addressPages: AddressPages;
  readonly metrics: GatewayMetrics;
  readonly clock: Clock;
  /** LIVECOUNT_SSE_HEARTBEAT_S: every stream gets a comment this often. */
  readonly heartbeatS: number;
  /** LIVECOUNT_MAX_BACKPRESSURE_BYTES: a stream with more unsent bytes is closed as a slow consumer. */
  readonly maxUnsentBytes: number;
}

/** Why a stream ended, for `livecount_gateway_event_streams_closed_total{reason}`. */
type EndReason = "client" | "slow_consumer" | "shutdown";

interface EventStream {
  readonly res: HttpResponse;
  readonly page: string;
  /** What it counts under in the connection limits and the page budget: its client address. */
  readonly key: string;
  /** Bytes written since uWS last took a write whole (see `#send`). */
  unsent: number;
  ended: boolean;
}

/** Every answer of the endpoint, a HEAD's included. */
export const STREAM_HEADERS: Readonly<Record<string, string>> = {
  "content-type": "text/event-stream",
  "cache-control": "no-store",
  // Proxies such as nginx buffer a response unless told not to: events would wait in the buffer.
  "x-accel-buffering": "no",
};
const HEARTBEAT = Buffer.from(": ping\n\n");
/** The first bytes of a stream whose page's value is not known yet: the headers go out at once. */
const OPENED = Buffer.from(": open\n\n");
/** Seconds a client refused during shutdown should wait (another gateway will take it). */
const SHUTDOWN_RETRY_S = 1;

/** One `event: count` of a count frame already encoded as JSON; its `id` is the frame's `ts`. */
function countEvent(ts: number, json: string): Buffer {
  return Buffer.from(`event: count\nid: ${ts}\ndata: ${json}\n\n`);
}

export class EventStreams {
  readonly #o: EventStreamsOptions;
  /** The open streams by page; a page leaves with its last stream. */
  readonly #byPage = new Map<string, Set<EventStream>>();
  #heartbeat: TimerHandle | undefined;
  #stopping = false;

  constructor(options: EventStreamsOptions) {
    this.#o = options;
  }

  /** Streams open now. */
  get size(): number {
    let open = 0;
    for (const streams of this.#byPage.values()) open += streams.size;
    return open;
  }

  /** Whether the heartbeat timer is set: exactly while some stream is open. */
  get heartbeatArmed(): boolean {
    return this.#heartbeat !== undefined;
  }

  /** Whether some stream watches `page`. */
  has(page: string): boolean {
    return this.#byPage.has(page);
  }

  /**
   * Opens a stream of `page` for a request already admitted as a read of it (read_access.ts), or
   * throws, having taken nothing: RetryLaterError past the address's or the gateway's connection
   * quota, `too_many_pages` or `rate_limited` past the address's page budget.
   */
  open(reply: Reply, req: RequestInfo, page: string): void {
    if (reply.aborted) return;
    if (this.#stopping)
      throw new RetryLaterError("unavailable", SHUTDOWN_RETRY_S, "this gateway is stopping");
    // A stream stays open, and uWS would read a body sent with it (chunked, it never ends) all along.
    if (req.hasBody) throw new ProtocolError("invalid_body", "an event stream takes no request body");
    if (req.head) return reply.send(200, "", STREAM_HEADERS);
    const key = this.#o.guard.admitStream(req.address);
    const refusal = this.#o.addressPages.take(key, page, !this.#o.views.has(page));
    if (refusal !== undefined) throw refusal;
    const stream: EventStream = { res: reply.res, page, key, unsent: 0, ended: false };
    this.#o.guard.opened(key);
    reply.onAbort = () => this.#end(stream, "client");
    let streams = this.#byPage.get(page);
    if (streams === undefined) this.#byPage.set(page, (streams = new Set()));
    streams.add(stream);
    this.#o.metrics.eventStreams.inc();
    const current = this.#o.views.watch(page).frame;
    this.#o.metrics.watchedPages.set(this.#o.views.size);
    const first = current === undefined ? OPENED : countEvent(current.ts, encodeServerFrame(current, "json"));
    this.#send(stream, first, () => {
      stream.res.writeStatus("200 OK");
      for (const [k, v] of Object.entries({ ...reply.common, ...STREAM_HEADERS }))
        stream.res.writeHeader(k, v);
    });
    this.#armHeartbeat();
  }

  /** Writes a count frame of `page`, encoded as JSON once, to every stream of the page as one buffer. */
  publish(page: string, ts: number, json: string): void {
    const streams = this.#byPage.get(page);
    if (streams === undefined) return;
    const event = countEvent(ts, json);
    // A stream `#send` ends leaves the set while it is iterated: a Set iterator allows that.
    for (const stream of streams) this.#send(stream, event);
  }

  /** Ends every stream cleanly (the gateway stops: clients reconnect, to another gateway) and refuses new ones. */
  endAll(): void {
    this.#stopping = true;
    for (const streams of this.#byPage.values()) for (const stream of streams) this.#end(stream, "shutdown");
  }

  /**
   * Writes `chunk` (after `head`, in the same cork). uWS takes every write and buffers what the
   * socket does not; a write that comes back false left bytes in that buffer, one that comes back
   * true found it drained. So the bytes written since the last true write bound what is unsent;
   * past LIVECOUNT_MAX_BACKPRESSURE_BYTES the stream is closed, as a socket is. (uWS's
   * getWriteOffset stays 0 for chunked writes, so it cannot tell.)
   */
  #send(stream: EventStream, chunk: Buffer, head?: () => void): void {
    let taken = true;
    stream.res.cork(() => {
      head?.();
      taken = stream.res.write(chunk);
    });
    stream.unsent = taken ? 0 : stream.unsent + chunk.byteLength;
    if (stream.unsent > this.#o.maxUnsentBytes) this.#end(stream, "slow_consumer");
  }

  #armHeartbeat(): void {
    if (this.#heartbeat !== undefined || this.#byPage.size === 0) return;
    this.#heartbeat = this.#o.clock.setTimeout(() => {
      this.#heartbeat = undefined;
      for (const streams of this.#byPage.values())
        for (const stream of streams) this.#send(stream, HEARTBEAT);
      this.#armHeartbeat();
    }, this.#o.heartbeatS * 1000);
  }

  /** The one teardown: the watch, the page budget, the connection slot, the heartbeat when it was the last. */
  #end(stream: EventStream, reason: EndReason): void {
    if (stream.ended) return;
    stream.ended = true;
    const streams = this.#byPage.get(stream.page);
    streams?.delete(stream);
    if (streams?.size === 0) this.#byPage.delete(stream.page);
    this.#o.views.unwatch(stream.page);
    this.#o.addressPages.release(stream.key);
    this.#o.guard.streamClosed(stream.key);
    this.#o.metrics.eventStreams.dec();
    this.#o.metrics.eventStreamsClosed.inc({ reason });
    this.#o.metrics.watchedPages.set(this.#o.views.size);
    if (this.#byPage.size === 0 && this.#heartbeat !== undefined) {
      this.#o.clock.clearTimeout(this.#heartbeat);
      this.#heartbeat = undefined;
    }
    // The client is gone already; a slow one is cut (uWS then calls onAborted, a no-op now); at
    // shutdown the stream ends with its last chunk, so the client sees a clean end and reconnects.
    if (reason === "slow_consumer") stream.res.close();
    else if (reason === "shutdown") stream.res.cork(() => stream.res.end());
  }
}
