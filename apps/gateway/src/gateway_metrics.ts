import { Counter, Gauge, type Registry } from "prom-client";

/** A gateway's Prometheus metrics, registered on the process's registry. */
export class GatewayMetrics {
  readonly sockets: Gauge;
  readonly socketsOpened: Counter;
  readonly socketsClosed: Counter<"reason">;
  readonly framesIn: Counter<"type">;
  readonly frameErrors: Counter<"code">;
  readonly countFrames: Counter;
  readonly countsFrames: Counter;
  readonly pageFramesSpaced: Counter;
  readonly presenceOpsSent: Counter;
  /** Bus requests that carried publisher increments to owners, and the increments they carried. */
  readonly incrementRequests: Counter;
  readonly incrementsSent: Counter;
  readonly watchedPages: Gauge;
  readonly localViewers: Gauge;
  readonly httpRequests: Counter<"route" | "status">;
  readonly busSlowConsumers: Counter;
  readonly busReconnects: Counter;
  readonly counterNodes: Gauge;
  readonly upgradesRefused: Counter<"reason">;
  readonly requestsDropped: Counter<"reason">;
  readonly framesDropped: Counter;
  readonly eventStreams: Gauge;
  readonly eventStreamsClosed: Counter<"reason">;

  constructor(registry: Registry) {
    const registers = [registry];
    this.sockets = new Gauge({
      name: "livecount_gateway_sockets",
      help: "Open WebSocket connections",
      registers,
    });
    this.socketsOpened = new Counter({
      name: "livecount_gateway_sockets_opened_total",
      help: "WebSocket connections opened",
      registers,
    });
    this.socketsClosed = new Counter({
      name: "livecount_gateway_sockets_closed_total",
      help: "WebSocket connections closed by reason",
      labelNames: ["reason"],
      registers,
    });
    this.framesIn = new Counter({
      name: "livecount_gateway_frames_in_total",
      help: "Client frames by type",
      labelNames: ["type"],
      registers,
    });
    this.frameErrors = new Counter({
      name: "livecount_gateway_frame_errors_total",
      help: "Error frames sent by code",
      labelNames: ["code"],
      registers,
    });
    this.countFrames = new Counter({
      name: "livecount_gateway_count_frames_published_total",
      help: "Count frames published to page topics (once per page update and encoding) and to event streams (once per page update)",
      registers,
    });
    this.countsFrames = new Counter({
      name: "livecount_gateway_counts_frames_published_total",
      help: "Counts frames published to page-set topics (once per window per set of pages that counts sockets watch in one encoding)",
      registers,
    });
    this.pageFramesSpaced = new Counter({
      name: "livecount_gateway_page_frames_spaced_total",
      help: "Changed pages whose frame waited past the coalescing window, their watchers here too many for LIVECOUNT_PAGE_FRAME_RATE (once per window waited)",
      registers,
    });
    this.presenceOpsSent = new Counter({
      name: "livecount_gateway_presence_ops_sent_total",
      help: "Presence operations acknowledged by owners",
      registers,
    });
    this.incrementRequests = new Counter({
      name: "livecount_gateway_increment_requests_total",
      help: "Bus requests carrying publisher increments to owners (a batch is one)",
      registers,
    });
    this.incrementsSent = new Counter({
      name: "livecount_gateway_increments_sent_total",
      help: "Publisher increments sent to owners, in batches or alone",
      registers,
    });
    this.watchedPages = new Gauge({
      name: "livecount_gateway_watched_pages",
      help: "Pages with at least one watcher here",
      registers,
    });
    this.localViewers = new Gauge({
      name: "livecount_gateway_local_viewers",
      help: "Distinct (page, viewer) pairs held here",
      registers,
    });
    this.httpRequests = new Counter({
      name: "livecount_gateway_http_requests_total",
      help: "HTTP requests by route and status",
      labelNames: ["route", "status"],
      registers,
    });
    this.busSlowConsumers = new Counter({
      name: "livecount_gateway_bus_slow_consumer_total",
      help: "Bus slow-consumer events",
      registers,
    });
    this.busReconnects = new Counter({
      name: "livecount_gateway_bus_reconnects_total",
      help: "Bus reconnections",
      registers,
    });
    this.counterNodes = new Gauge({
      name: "livecount_gateway_counter_nodes",
      help: "Counter nodes on this gateway's ring: heard within the node lease",
      registers,
    });
    this.upgradesRefused = new Counter({
      name: "livecount_gateway_upgrades_refused_total",
      help: "WebSocket upgrades refused by reason (not_websocket, key, version, origin, per_ip, gateway_full, stopping)",
      labelNames: ["reason"],
      registers,
    });
    this.requestsDropped = new Counter({
      name: "livecount_gateway_requests_dropped_total",
      help: "HTTP requests and upgrades closed unanswered by reason (ambiguous_length: Content-Length headers that differ, or beside Transfer-Encoding)",
      labelNames: ["reason"],
      registers,
    });
    this.framesDropped = new Counter({
      name: "livecount_gateway_frames_dropped_total",
      help: "Frames not sent to a slow consumer (over LIVECOUNT_MAX_BACKPRESSURE_BYTES unsent); the socket is closed",
      registers,
    });
    this.eventStreams = new Gauge({
      name: "livecount_gateway_event_streams",
      help: "Open Server-Sent Events streams (GET /v1/pages/{page}/events)",
      registers,
    });
    this.eventStreamsClosed = new Counter({
      name: "livecount_gateway_event_streams_closed_total",
      help: "Server-Sent Events streams closed by reason (client, slow_consumer, shutdown)",
      labelNames: ["reason"],
      registers,
    });
  }
}
