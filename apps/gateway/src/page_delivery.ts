import {
  encodeCountsEntry,
  encodeServerFrame,
  spliceCountsFrame,
  type CountFrame,
  type Encoding,
} from "@livecount/protocol";
import type { TemplatedApp } from "uWebSockets.js";
import type { EventStreams } from "./event_streams.js";
import type { GatewayMetrics } from "./gateway_metrics.js";
import { PageSetTopics, type TopicPublisher } from "./page_set_topics.js";
import type { Socket, SocketData } from "./socket_router.js";

export interface PageDeliveryOptions {
  readonly app: TemplatedApp;
  readonly streams: EventStreams;
  readonly metrics: GatewayMetrics;
}

/** The topic count frames of `page` are published on for protocol v1 sockets speaking `encoding`. */
function topicOf(page: string, encoding: Encoding): string {
  return (encoding === "json" ? "j:" : "m:") + page;
}

/**
 * How pages' values reach sockets and event streams. Protocol v1 sockets subscribe to a uWS topic
 * per page and encoding and get a count frame per changed page. Sockets that negotiated `counts`
 * frames subscribe to the topic of their page set (page_set_topics.ts) and get one frame per
 * window with all their changed pages. Each window is published at once, so uWS writes what a
 * socket gets from it together.
 */
export class PageDelivery {
  readonly #o: PageDeliveryOptions;
  readonly #sets = new PageSetTopics();
  readonly #publishToTopic: TopicPublisher;

  constructor(options: PageDeliveryOptions) {
    this.#o = options;
    this.#publishToTopic = (topic, frame, isBinary) => options.app.publish(topic, frame, isBinary);
  }

  /** The socket took `page` (already in its pages) in `encoding`: the page's values now reach it. */
  follow(ws: Socket, state: SocketData, page: string, encoding: Encoding): void {
    if (state.counts) this.#regroup(ws, state, encoding);
    else ws.subscribe(topicOf(page, encoding));
  }

  /** The socket dropped `page` (already out of its pages), taken in `encoding`. */
  unfollow(ws: Socket, state: SocketData, page: string, encoding: Encoding): void {
    if (state.counts) this.#regroup(ws, state, encoding);
    else ws.unsubscribe(topicOf(page, encoding));
  }

  /** The socket closed (uWS has dropped its topics): it leaves its page sets. */
  closed(state: SocketData): void {
    if (state.jsonSet !== undefined) this.#sets.leave(state.jsonSet);
    if (state.msgpackSet !== undefined) this.#sets.leave(state.msgpackSet);
    state.jsonSet = state.msgpackSet = undefined;
  }

  /** A page's current value, to one socket: a count frame, or a counts frame of that page alone. */
  send(ws: Socket, state: SocketData, encoding: Encoding, frame: CountFrame): void {
    const data = state.counts
      ? spliceCountsFrame(frame.ts, [encodeCountsEntry(frame, encoding)], encoding)
      : encodeServerFrame(frame, encoding);
    ws.send(data, encoding === "msgpack");
  }

  /**
   * Publishes one window's changed values, all computed at `ts`: count frames to the pages' topics
   * and event streams, and one counts frame per page set with a changed page.
   */
  publish(ts: number, frames: readonly CountFrame[]): void {
    for (const frame of frames) this.#publishCount(frame);
    if (this.#sets.size > 0)
      this.#o.metrics.countsFrames.inc(this.#sets.publish(ts, frames, this.#publishToTopic));
  }

  /** Moves a counts socket to the page set of its pages in `encoding` (after it took or dropped one). */
  #regroup(ws: Socket, state: SocketData, encoding: Encoding): void {
    const pages: string[] = [];
    for (const [page, m] of state.pages) if (m.encoding === encoding) pages.push(page);
    // Two fields rather than a map per socket: every idle viewer holds them.
    if (encoding === "json") state.jsonSet = this.#sets.move(ws, state.jsonSet, pages, encoding);
    else state.msgpackSet = this.#sets.move(ws, state.msgpackSet, pages, encoding);
  }

  /**
   * Encodes a count frame once per encoding that has subscribers and publishes it to the page's
   * topic; event streams of the page get the JSON the sockets get.
   */
  #publishCount(frame: CountFrame): void {
    const { app, streams, metrics } = this.#o;
    let json: string | undefined;
    const topic = topicOf(frame.page, "json");
    if (app.numSubscribers(topic) > 0) {
      app.publish(topic, (json = encodeServerFrame(frame, "json")), false);
      metrics.countFrames.inc();
    }
    if (streams.has(frame.page)) {
      streams.publish(frame.page, frame.ts, json ?? encodeServerFrame(frame, "json"));
      metrics.countFrames.inc();
    }
    const msgpack = topicOf(frame.page, "msgpack");
    if (app.numSubscribers(msgpack) > 0) {
      app.publish(msgpack, encodeServerFrame(frame, "msgpack"), true);
      metrics.countFrames.inc();
    }
  }
}
