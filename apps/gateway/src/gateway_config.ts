import { randomUUID } from "node:crypto";
import { readClusterConfig, type ClusterConfig } from "@livecount/cluster";
import { ConfigError, readInt, readList, type Env } from "@livecount/runtime";
import { readEdgeConfig, type EdgeConfig } from "./edge_config.js";

/** A gateway's settings; each documented with its variable, default and reason. */
export interface GatewayConfig extends ClusterConfig, EdgeConfig {
  /** LIVECOUNT_PORT: WebSocket and HTTP port; 0 picks a free one. Default 8080. */
  readonly port: number;
  /** LIVECOUNT_HOST: address to listen on. Default 0.0.0.0. */
  readonly host: string;
  /**
   * LIVECOUNT_LISTEN_SOCKETS: sockets listening on the port (SO_REUSEPORT), each with uWS's fixed
   * accept queue of 512 handshakes (listen_sockets.ts). Default 32: 16,384 handshakes may wait
   * between two event-loop turns. The kernel spreads connections over the queues by a hash of their
   * addresses, unevenly, so the queues need room to spare: in the 18,000-tab storm bench, 8 queues
   * dropped 5,568 handshakes (each retried 1 s later), 16 dropped 330, 32 none. Each costs one file
   * descriptor. A port of 0 is listened on once.
   */
  readonly listenSockets: number;
  /**
   * LIVECOUNT_IDLE_TIMEOUT_S: a socket that answers no ping for this long is closed and stops
   * counting. Default 16, minimum 8 (uWS works in 4 s steps).
   */
  readonly idleTimeoutS: number;
  /** LIVECOUNT_PUBLISHER_KEYS: comma-separated bearer keys allowed to change counters. */
  readonly publisherKeys: readonly string[];
  /** LIVECOUNT_PUBLISHER_RATE: requests per second one publisher key may make here, sustained. Default 1000. */
  readonly publisherRatePerS: number;
  /** LIVECOUNT_PUBLISHER_BURST: requests one publisher key may make here at once. Default 2000. */
  readonly publisherBurst: number;
  /** LIVECOUNT_MAX_PAGES_PER_SOCKET: pages one socket may join or watch. Default 64. */
  readonly maxPagesPerSocket: number;
  /** LIVECOUNT_SOCKET_RATE: frames per second a socket may send, sustained. Default 20. */
  readonly socketRatePerS: number;
  /** LIVECOUNT_SOCKET_BURST: frames a socket may send at once. Default 100 (a page full of widgets). */
  readonly socketBurst: number;
  /**
   * LIVECOUNT_SOCKET_MAX_REFUSED: frames refused for the rate limit, since the socket's budget was
   * last full, that close it (1008). Default 100, a burst's worth: a widget sends a few frames a
   * minute, so one that has a hundred refused without once letting its budget fill (the burst over
   * the rate: 5 s at the defaults) is a script flooding, and each refusal still costs an answer.
   */
  readonly socketMaxRefused: number;
  /**
   * LIVECOUNT_MAX_BACKPRESSURE_BYTES: a socket or event stream with more unsent bytes is closed as a
   * slow consumer. Default 65536.
   */
  readonly maxBackpressureBytes: number;
  /**
   * LIVECOUNT_SSE_HEARTBEAT_S: every event stream gets a comment this often. Default 15: proxies
   * and load balancers close a connection that carries nothing for 60 s (nginx's
   * proxy_read_timeout, an AWS load balancer's idle timeout), some for 30 s, and 15 s stays well
   * inside either; a write is also how a client that went away is found. About 10 bytes per
   * stream each time.
   */
  readonly sseHeartbeatS: number;
  /**
   * LIVECOUNT_PAGE_FRAME_RATE: count frames a second this gateway sends for one page, over all its
   * watchers. Default 20,000, a third of the 57,773 frames a second a gateway is planned at
   * (docs/capacity.md), so one hot page cannot take a gateway from the rest: a page with up to 1,000
   * watchers on the gateway keeps a frame per 50 ms window, one with 10,000 gets two a second, and
   * every page at least one a second while it changes.
   */
  readonly pageFrameRate: number;
  /** LIVECOUNT_PRESENCE_BATCH_MS: presence transitions wait this long to share a batch. Default 5. */
  readonly presenceBatchMs: number;
  /** Fixed by protocol v1: a frame over 16 KiB closes the socket with 1009 (message too big). */
  readonly maxFrameBytes: number;
  /**
   * uWS's own frame limit (maxPayloadLength). A frame up to this reaches the gateway, which closes
   * with 1009 past maxFrameBytes; past this uWS drops the connection without a close frame (the
   * client sees 1006). 64 KiB: what one socket can make uWS buffer is bounded by it, 32 MB for an
   * address's whole connection quota.
   */
  readonly wireFrameBytes: number;
  /** Largest HTTP request body accepted. 64 KiB. */
  readonly maxBodyBytes: number;
  /**
   * LIVECOUNT_MAX_HEADER_BYTES: the most bytes a request line and its headers may take, up to the
   * blank line that ends them, WebSocket upgrades included; a longer head is answered 431 and its
   * connection closed. Default 8 KiB: a browser sends the cookies of the gateway's domain with every
   * upgrade and read, and a site's cookies pass the 4 KiB uWS takes by itself; 8 KiB is what nginx
   * takes in one header line by default. Read once per process, when uWS loads (uws.ts).
   */
  readonly maxHeaderBytes: number;
  /** Derived: this process's incarnation id; a restart is a new contributor of presence. */
  readonly incarnation: string;
}

export const MAX_FRAME_BYTES = 16 * 1024;
export const WIRE_FRAME_BYTES = 64 * 1024;
export const MAX_BODY_BYTES = 64 * 1024;
const MIN_IDLE_TIMEOUT_S = 8;
/** Past this many accept queues the handshakes wait on the event loop, not on queue depth. */
const MAX_LISTEN_SOCKETS = 64;

/**
 * LIVECOUNT_MAX_HEADER_BYTES (GatewayConfig.maxHeaderBytes). At least 4 KiB, uWS's own, in which a
 * join token (up to 2048 characters) fits in `Authorization` or `?token=` beside a browser's other
 * headers, as protocol v1 says; at most 64 KiB, since a connection whose head arrives in pieces
 * holds that much until it ends or times out.
 */
export function readMaxHeaderBytes(env: Env): number {
  return readInt(env, "LIVECOUNT_MAX_HEADER_BYTES", 8 * 1024, { min: 4 * 1024, max: 64 * 1024 });
}

export function readGatewayConfig(env: Env): GatewayConfig {
  const cluster = readClusterConfig(env);
  const idleTimeoutS = readInt(env, "LIVECOUNT_IDLE_TIMEOUT_S", 16, { min: MIN_IDLE_TIMEOUT_S, max: 960 });
  const publisherKeys = readList(env, "LIVECOUNT_PUBLISHER_KEYS");
  for (const key of publisherKeys) {
    if (!/^[\x21-\x7e]{8,256}$/.test(key))
      throw new ConfigError("LIVECOUNT_PUBLISHER_KEYS: each key must be 8..256 printable ASCII characters");
  }
  return {
    ...cluster,
    ...readEdgeConfig(env),
    port: readInt(env, "LIVECOUNT_PORT", 8080, { min: 0, max: 65535 }),
    host: env.LIVECOUNT_HOST?.trim() || "0.0.0.0",
    listenSockets: readInt(env, "LIVECOUNT_LISTEN_SOCKETS", 32, { min: 1, max: MAX_LISTEN_SOCKETS }),
    idleTimeoutS,
    publisherKeys,
    publisherRatePerS: readInt(env, "LIVECOUNT_PUBLISHER_RATE", 1000, { min: 1 }),
    publisherBurst: readInt(env, "LIVECOUNT_PUBLISHER_BURST", 2000, { min: 1 }),
    maxPagesPerSocket: readInt(env, "LIVECOUNT_MAX_PAGES_PER_SOCKET", 64, { min: 1, max: 10000 }),
    socketRatePerS: readInt(env, "LIVECOUNT_SOCKET_RATE", 20, { min: 1 }),
    socketBurst: readInt(env, "LIVECOUNT_SOCKET_BURST", 100, { min: 1 }),
    socketMaxRefused: readInt(env, "LIVECOUNT_SOCKET_MAX_REFUSED", 100, { min: 1 }),
    maxBackpressureBytes: readInt(env, "LIVECOUNT_MAX_BACKPRESSURE_BYTES", 65536, { min: 1024 }),
    sseHeartbeatS: readInt(env, "LIVECOUNT_SSE_HEARTBEAT_S", 15, { min: 1, max: 300 }),
    pageFrameRate: readInt(env, "LIVECOUNT_PAGE_FRAME_RATE", 20_000, { min: 1 }),
    presenceBatchMs: readInt(env, "LIVECOUNT_PRESENCE_BATCH_MS", 5, { min: 0, max: 1000 }),
    maxFrameBytes: MAX_FRAME_BYTES,
    wireFrameBytes: WIRE_FRAME_BYTES,
    maxBodyBytes: MAX_BODY_BYTES,
    maxHeaderBytes: readMaxHeaderBytes(env),
    incarnation: `${cluster.nodeId}-${randomUUID().slice(0, 8)}`,
  };
}
