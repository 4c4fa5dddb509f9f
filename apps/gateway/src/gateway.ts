import type { Bus } from "@livecount/bus";
import {
  BUS_SILENCE_HEARTBEATS,
  BusPulse,
  DcLiveness,
  GatewayHeartbeatSender,
  Membership,
  registerBusPulseMetrics,
  registerDcMetrics,
  type GatewayIdHolder,
} from "@livecount/cluster";
import { COUNTS_SUBPROTOCOL, answeredSubprotocol } from "@livecount/protocol";
import { systemClock, type Clock, type Logger } from "@livecount/runtime";
import type { Registry } from "prom-client";
import type * as uWS from "uWebSockets.js";
import { ClientAddresses } from "./client_address.js";
import { ConnectionLimits } from "./connection_limits.js";
import { EdgeGuard, offeredSubprotocols } from "./edge_guard.js";
import { EventStreams } from "./event_streams.js";
import type { GatewayConfig } from "./gateway_config.js";
import { HttpRequests } from "./http_requests.js";
import { GatewayMetrics } from "./gateway_metrics.js";
import { AddressPages } from "./address_pages.js";
import { AdminApi } from "./admin_api.js";
import { HttpApi, type HttpRoute } from "./http_api.js";
import { loadAssets } from "./http_assets.js";
import { Reply, requestInfo } from "./http_io.js";
import { ListenSockets } from "./listen_sockets.js";
import { LocalPresence } from "./local_presence.js";
import { OriginPolicy } from "./origin_policy.js";
import { IncrementBatcher } from "./increment_batcher.js";
import { OwnerClient } from "./owner_client.js";
import { PageDelivery } from "./page_delivery.js";
import { PageViews, type FrameSink } from "./page_views.js";
import { PresenceForwarder } from "./presence_forwarder.js";
import { MAX_PRESENCE_REQUEST_BYTES } from "./presence_chunks.js";
import { PrivatePages } from "./private_pages.js";
import { AddressRateLimiter } from "./rate_limits.js";
import { GatewayStoppedError, ringKnown } from "./ring_wait.js";
import { createApp } from "./uws_app.js";
import { SocketRouter, type SocketData } from "./socket_router.js";

export interface GatewayOptions {
  readonly config: GatewayConfig;
  readonly bus: Bus;
  readonly logger: Logger;
  readonly registry: Registry;
  readonly clock?: Clock;
  /** Extra `POST` routes of the embedding process (the demo page's buttons); see HttpApiOptions. */
  readonly routes?: ReadonlyMap<string, HttpRoute>;
  /**
   * How long `start()` waits to learn the ring (counter nodes answer a new gateway's first
   * heartbeat with theirs) before it takes sockets, so the first joins after a restart find their
   * owners. Default 0: listen at once (the standalone process starts its counter node afterwards).
   */
  readonly ringWaitMs?: number;
  /** A later process beats under this gateway's node id (GatewayHeartbeatOptions.onSuperseded). */
  readonly onSuperseded?: (by: GatewayIdHolder) => void;
}

/** uWS's DISABLED compression: count frames are tiny and per-message deflate costs CPU and memory per socket. */
const NO_COMPRESSION = 0;
/** WebSocket close code for a server going away (RFC 6455). */
const CLOSE_GOING_AWAY = 1001;
/** Retry delays towards owners: full jitter under a cap that starts at retryMs and doubles up to maxRetryMs. */
const OWNER_RETRY = { retryMs: 100, maxRetryMs: 5000 } as const;
/** How long shutdown waits for queued presence to reach the owners. */
const SHUTDOWN_DRAIN_MS = 2000;
/** Over the owner request timeout, for a request's other steps (the batcher's wait, writing the answer). */
const HTTP_DRAIN_MARGIN_MS = 1000;
/**
 * A closed socket keeps its address's slot, and a socket remembers a viewer id it left, this long
 * past the grace window: the owner drops the lingering viewer at its sweep after the grace (at most
 * 250 ms later), once the leave has reached it, and the watchers see it a coalesce window after
 * that. Released earlier, a churning address could show more viewers than its cap, or a socket
 * rejoining as another id two viewers, for that moment.
 */
const SLOT_HOLD_SLACK_MS = 1000;

/**
 * A gateway: terminates WebSockets (uWS, idle timeout with automatic pings finds dead sockets),
 * keeps this process's presence per page and forwards it to page owners, watches pages its sockets
 * watch and publishes each coalescing window's changed values to them (page_delivery.ts), and
 * serves the HTTP API.
 */
export class Gateway {
  readonly #o: GatewayOptions;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #metrics: GatewayMetrics;
  readonly #membership: Membership;
  readonly #liveness: DcLiveness;
  /**
   * Only with NATS: its answers tell the DC liveness a silent bus from silent DCs (the in-memory bus
   * is this process).
   */
  readonly #pulse: BusPulse | undefined;
  readonly #admin: AdminApi;
  readonly #presence = new LocalPresence();
  readonly #forwarder: PresenceForwarder;
  readonly #views: PageViews;
  readonly #delivery: PageDelivery;
  readonly #router: SocketRouter;
  readonly #streams: EventStreams;
  readonly #requests: HttpRequests;
  readonly #app: uWS.TemplatedApp;
  readonly #heartbeat: GatewayHeartbeatSender;
  readonly #unsubscribers: Array<() => void> = [];
  readonly #listening = new ListenSockets();
  #port = 0;
  #status: "new" | "starting" | "running" | "stopping" | "stopped" = "new";
  /** The stop under way or done: a second caller (a signal during a superseded stop) waits for it. */
  #stopped: Promise<void> | undefined;
  /** Settles when a stop begins: a start still waiting for the ring gives up. */
  #stopBegins: () => void = () => {};
  readonly #stopBegun = new Promise<void>((resolve) => (this.#stopBegins = resolve));

  constructor(options: GatewayOptions) {
    this.#o = options;
    const { config, bus } = options;
    this.#clock = options.clock ?? systemClock;
    this.#log = options.logger.child({ component: "gateway", gateway: config.incarnation, dc: config.dc });
    this.#metrics = new GatewayMetrics(options.registry);
    this.#membership = new Membership({
      bus,
      clock: this.#clock,
      logger: this.#log,
      dc: config.dc,
      partitions: config.partitions,
      vnodes: config.vnodes,
      leaseMs: config.nodeLeaseMs,
    });
    const pulse = (this.#pulse =
      config.natsUrl === undefined
        ? undefined
        : new BusPulse({ bus, clock: this.#clock, intervalMs: config.dcHeartbeatMs }));
    if (pulse !== undefined)
      registerBusPulseMetrics(options.registry, "livecount_gateway", pulse, this.#clock);
    this.#liveness = new DcLiveness({
      bus,
      clock: this.#clock,
      logger: this.#log,
      dc: config.dc,
      leaseMs: config.dcLeaseMs,
      heartbeatMs: config.dcHeartbeatMs,
      ...(pulse !== undefined
        ? { silence: { health: pulse, silenceMs: BUS_SILENCE_HEARTBEATS * config.dcHeartbeatMs } }
        : {}),
    });
    registerDcMetrics(options.registry, "livecount_gateway", this.#liveness, () => this.#clock.now());
    const owners = new OwnerClient(bus, this.#membership, config.dc, config.requestTimeoutMs);
    this.#forwarder = new PresenceForwarder({
      owners,
      presence: this.#presence,
      clock: this.#clock,
      logger: this.#log,
      gateway: config.incarnation,
      partitions: config.partitions,
      batchMs: config.presenceBatchMs,
      ...OWNER_RETRY,
      onSent: (ops) => this.#metrics.presenceOpsSent.inc(ops),
      maxRequestBytes: () => Math.min(MAX_PRESENCE_REQUEST_BYTES, bus.maxPayload / 2),
    });
    this.#heartbeat = new GatewayHeartbeatSender({
      bus,
      clock: this.#clock,
      logger: this.#log,
      dc: config.dc,
      gateway: config.incarnation,
      node: config.nodeId,
      startedAt: this.#clock.now(),
      leaseMs: config.gatewayLeaseMs,
      // Owners may have let our lease lapse and dropped our viewers: give them everything again.
      onStall: () => this.#forwarder.resyncAll(),
      released: this.#forwarder,
      ...(options.onSuperseded !== undefined ? { onSuperseded: options.onSuperseded } : {}),
      onBeat: () => this.#metrics.localViewers.set(this.#presence.size),
      stats: () => ({ sockets: this.#router.openSockets, viewers: this.#presence.size }),
    });
    this.#app = createApp(config);
    const sink: FrameSink = { publish: (ts, frames) => this.#delivery.publish(ts, frames) };
    this.#views = new PageViews({
      dc: config.dc,
      bus,
      owners,
      sink,
      liveness: this.#liveness,
      clock: this.#clock,
      logger: this.#log,
      partitions: config.partitions,
      coalesceMs: config.coalesceMs,
      pageFrameRate: config.pageFrameRate,
      onSpaced: (pages) => this.#metrics.pageFramesSpaced.inc(pages),
      ...OWNER_RETRY,
      onServing: (partition) => this.#forwarder.ownerServing(partition),
    });
    const now = (): number => this.#clock.now();
    const privatePages = new PrivatePages({
      secret: config.joinSecret,
      prefixes: config.privatePrefixes,
      now,
    });
    const origins = new OriginPolicy(config.allowedOrigins);
    const guard = new EdgeGuard({
      origins,
      addresses: new ClientAddresses(config.trustedProxies),
      limits: new ConnectionLimits(
        config.maxConnectionsPerIp,
        config.maxConnections,
        config.graceMs + SLOT_HOLD_SLACK_MS,
        () => this.#clock.monotonic(),
      ),
      metrics: this.#metrics,
      stopping: () => this.#status === "stopping" || this.#status === "stopped",
    });
    // Sockets and event streams of an address share one page budget.
    const addressPages = AddressPages.of(config, now);
    const dropped = (reason: string): void => void this.#metrics.requestsDropped.inc({ reason });
    this.#requests = new HttpRequests(this.#clock, (origin) => origins.corsHeaders(origin), dropped);
    this.#streams = new EventStreams({
      views: this.#views,
      guard,
      addressPages,
      metrics: this.#metrics,
      clock: this.#clock,
      heartbeatS: config.sseHeartbeatS,
      maxUnsentBytes: config.maxBackpressureBytes,
    });
    this.#delivery = new PageDelivery({ app: this.#app, streams: this.#streams, metrics: this.#metrics });
    this.#router = new SocketRouter({
      presence: this.#presence,
      forwarder: this.#forwarder,
      views: this.#views,
      delivery: this.#delivery,
      metrics: this.#metrics,
      clock: this.#clock,
      incarnation: config.incarnation,
      maxPagesPerSocket: config.maxPagesPerSocket,
      addressPages,
      ratePerS: config.socketRatePerS,
      burst: config.socketBurst,
      maxRefused: config.socketMaxRefused,
      leftViewerHoldMs: config.graceMs + SLOT_HOLD_SLACK_MS,
      maxFrameBytes: config.maxFrameBytes,
      privatePages,
    });
    this.#admin = new AdminApi({
      bus,
      dc: config.dc,
      membership: this.#membership,
      liveness: this.#liveness,
      owners,
      clock: this.#clock,
      logger: this.#log,
      timeoutMs: config.requestTimeoutMs,
      settleMs: config.nodeLeaseMs,
      self: () => ({
        id: config.incarnation,
        sockets: this.#router.openSockets,
        viewers: this.#presence.size,
        last_heard: this.#clock.now(),
      }),
    });
    const api = new HttpApi({
      admin: this.#admin,
      owners,
      increments: new IncrementBatcher(owners, this.#clock, this.#metrics),
      metrics: this.#metrics,
      registry: options.registry,
      logger: this.#log,
      partitions: config.partitions,
      publisherKeys: config.publisherKeys,
      publisherRatePerS: config.publisherRatePerS,
      publisherBurst: config.publisherBurst,
      adminKey: config.adminKey,
      readLimiter: new AddressRateLimiter({
        ratePerS: config.readRatePerS,
        burst: config.readBurst,
        maxAddresses: config.readRateMaxAddresses,
        now,
        what: "page reads",
      }),
      httpLimiter: new AddressRateLimiter({
        ratePerS: config.httpRatePerS,
        burst: config.httpBurst,
        maxAddresses: config.readRateMaxAddresses,
        now,
        what: "requests",
      }),
      privatePages,
      now,
      maxBodyBytes: config.maxBodyBytes,
      events: this.#streams,
      isReady: () => this.ready,
      liveness: this.#liveness,
      assets: loadAssets(this.#log),
      ...(options.routes !== undefined ? { routes: options.routes } : {}),
    });
    this.#app
      .ws<SocketData>("/ws", {
        compression: NO_COMPRESSION,
        maxPayloadLength: config.wireFrameBytes,
        idleTimeout: config.idleTimeoutS,
        sendPingsAutomatically: true,
        maxBackpressure: config.maxBackpressureBytes,
        closeOnBackpressureLimit: true,
        upgrade: (res, req, context) => {
          const address = guard.admit(res, req);
          if (address === undefined) return;
          // A client offering livecount.counts gets counts frames and that subprotocol named back;
          // any other offer is answered as protocol v1 gateways always have: its first value.
          const protocol = answeredSubprotocol(offeredSubprotocols(req));
          res.upgrade(
            this.#router.newSocketData(address, protocol === COUNTS_SUBPROTOCOL),
            req.getHeader("sec-websocket-key"),
            protocol,
            req.getHeader("sec-websocket-extensions"),
            context,
          );
        },
        open: (ws) => {
          guard.opened(ws.getUserData().address);
          this.#router.open(ws);
        },
        message: (ws, data, isBinary) => this.#router.message(ws, data, isBinary),
        dropped: (ws) => this.#router.dropped(ws),
        close: (ws, code) => {
          this.#router.close(ws, code);
          guard.closed(ws.getUserData().address);
        },
      })
      .any("/*", (res, req) => {
        // The header now (uWS requests die at the first await), the address only when a route
        // asks: requests with a key never do.
        const forwardedFor = guard.forwardedForOf(req);
        const info = requestInfo(req, () => guard.clientAddressOf(res, forwardedFor));
        const reply = new Reply(res, info.head);
        reply.unreadBody = info.longBody;
        this.#requests.serve(reply, info, () => api.handle(reply, info));
      });
    if (config.adminKey === undefined)
      this.#log.warn(
        "LIVECOUNT_ADMIN_KEY is not set: /metrics and the status API answer 401 to everyone, and prefix listings take a publisher key only",
      );
  }

  get port(): number {
    return this.#port;
  }

  /** Ready when the bus is up and some counter node is live. */
  get ready(): boolean {
    return (
      this.#status === "running" &&
      this.#o.bus.status === "connected" &&
      this.#membership.ring.nodes.length > 0
    );
  }

  async start(): Promise<number> {
    if (this.#status !== "new") throw new Error("gateway already started");
    this.#status = "starting";
    const { config, bus } = this.#o;
    this.#membership.onChange((ring, previous, restarted) => {
      this.#metrics.counterNodes.set(ring.nodes.length);
      this.#forwarder.onRingChange(ring, previous, restarted);
      // A counter node restarted: its last updates of the pages watched here may never have come.
      if (restarted.size > 0) this.#views.resnapshotOwnedBy(ring, restarted);
    });
    // A counter node whose bus came back, or heard again after it was forgotten (cut off the bus
    // past the node lease, it kept its partitions: alone in its DC), may have lost what it
    // published meanwhile.
    this.#membership.onReconnect((node) =>
      this.#views.resnapshotOwnedBy(this.#membership.ring, new Set([node])),
    );
    this.#membership.start();
    this.#liveness.onChange(() => this.#views.liveDcsChanged());
    this.#pulse?.start();
    this.#liveness.start();
    this.#admin.start();
    this.#unsubscribers.push(
      bus.on("reconnected", () => {
        this.#metrics.busReconnects.inc();
        this.#log.warn("bus reconnected; resyncing presence and snapshots");
        this.#forwarder.reconnected();
        this.#views.resnapshotAll();
      }),
      bus.on("slowConsumer", (subject) => {
        this.#metrics.busSlowConsumers.inc();
        this.#log.warn({ subject }, "bus slow consumer");
      }),
    );
    this.#heartbeat.start();
    await ringKnown(this.#membership, this.#clock, this.#o.ringWaitMs ?? 0, this.#stopBegun);
    // Stopped meanwhile (superseded while it waited for the ring): it takes no sockets.
    if (this.#status !== "starting") throw new GatewayStoppedError();
    this.#port = await this.#listening.open(this.#app, config.host, config.port, config.listenSockets);
    if (this.#status !== "starting") {
      this.#listening.close();
      throw new GatewayStoppedError();
    }
    this.#status = "running";
    this.#log.info({ port: this.#port, sockets: this.#listening.size }, "gateway listening");
    return this.#port;
  }

  /**
   * Stops listening, closes sockets, lets HTTP requests finish, tells owners its viewers left; also
   * while it starts. Called again, it returns the stop under way; before `start()`, it does nothing.
   */
  stop(): Promise<void> {
    if (this.#status === "new") return Promise.resolve();
    this.#stopBegins();
    return (this.#stopped ??= this.#stop());
  }

  async #stop(): Promise<void> {
    this.#status = "stopping";
    this.#listening.close();
    this.#heartbeat.stop();
    await this.#o.bus.flush().catch(() => {});
    this.#router.endAll(CLOSE_GOING_AWAY, "server shutting down");
    this.#streams.endAll();
    const late = await this.#requests.drain(this.#o.config.requestTimeoutMs + HTTP_DRAIN_MARGIN_MS);
    if (late > 0) this.#log.warn({ requests: late }, "answered 503 to requests still in progress at stop");
    this.#app.close();
    await this.#forwarder.drain(SHUTDOWN_DRAIN_MS);
    this.#forwarder.close();
    this.#views.close();
    this.#membership.stop();
    this.#liveness.stop();
    this.#pulse?.stop();
    this.#admin.stop();
    for (const off of this.#unsubscribers) off();
    this.#status = "stopped";
    this.#log.info("gateway stopped");
  }

  /** Viewers this gateway holds (distinct per page); for diagnostics and tests. */
  get localViewers(): number {
    return this.#presence.size;
  }

  /** Event streams open here, and whether their heartbeat timer is armed; for diagnostics and tests. */
  get eventStreams(): { readonly open: number; readonly heartbeatArmed: boolean } {
    return { open: this.#streams.size, heartbeatArmed: this.#streams.heartbeatArmed };
  }
}
