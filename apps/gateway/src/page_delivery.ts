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
import { PageSetTopics, type PageSet, type TopicPublisher } from "./page_set_topics.js";
import type { Socket, SocketData } from "./socket_router.js";

export interface PageDeliveryOptions {
  readonly app: TemplatedApp;
  readonly streams: EventStreams;
  readonly metrics: GatewayMetrics;
}

/** A counts socket's page sets, of the pages it watches in JSON and in msgpack. */
export interface CountsSets {
  json: PageSet | undefined;
  msgpack: PageSet | undefined;
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

  /** The socket took `page` (not taken before) in `encoding`: the page's values now reach it. */
  follow(ws: Socket, state: SocketData, page: string, encoding: Encoding): void {
    const sets = state.counts;
    if (sets === undefined) ws.subscribe(topicOf(page, encoding));
    else
      sets[encoding] = this.#sets.move(
        ws,
        sets[encoding],
        [...(sets[encoding]?.pages ?? []), page],
        encoding,
      );
  }

  /**
   * The socket dropped `page`. Which encoding it took the page in is not stored (a field per
   * membership, for every idle viewer): a v1 socket leaves both of the page's topics, a counts
   * socket the set that holds the page.
   */
  unfollow(ws: Socket, state: SocketData, page: string): void {
    const sets = state.counts;
    if (sets === undefined) {
      ws.unsubscribe(topicOf(page, "json"));
      ws.unsubscribe(topicOf(page, "msgpack"));
      return;
    }
    const encoding: Encoding = sets.json?.pages.includes(page) === true ? "json" : "msgpack";
    const pages = (sets[encoding]?.pages ?? []).filter((p) => p !== page);
    sets[encoding] = this.#sets.move(ws, sets[encoding], pages, encoding);
  }

  /** The socket closed (uWS has dropped its topics): it leaves its page sets. */
  closed(state: SocketData): void {
    const sets = state.counts;
    if (sets === undefined) return;
    for (const set of [sets.json, sets.msgpack]) if (set !== undefined) this.#sets.leave(set);
    sets.json = sets.msgpack = undefined;
  }

  /** A page's current value, to one socket: a count frame, or a counts frame of that page alone. */
  send(ws: Socket, state: SocketData, encoding: Encoding, frame: CountFrame): void {
    const data =
      state.counts !== undefined
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
