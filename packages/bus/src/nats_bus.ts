/**
 * The bus over NATS core (nats.js 2.x): plain publish/subscribe, queue groups, and request/reply on
 * the client's shared inbox. No JetStream: durability lives in the store, and every consumer of the
 * bus resynchronises on `reconnected`.
 *
 * Handlers run inline, from the socket's data callback, in arrival order. nats.js 2.x keeps no
 * per-subscription backlog, so a slow handler is detected by nats-server, which closes the
 * connection (max_pending exceeded): this bus reconnects and reports `reconnected`, never
 * `slowConsumer`.
 */
import {
  connect,
  DebugEvents,
  Empty,
  Events,
  headers,
  ServiceErrorCodeHeader,
  ServiceErrorHeader,
  type Msg,
  type NatsConnection,
  type NatsError,
  type Subscription as NatsSubscription,
} from "nats";
import { maskedServers, withoutCredentials } from "./nats_servers.js";
import {
  BusClosedError,
  BusDisconnectedError,
  BusConnectError,
  DEFAULT_REQUEST_TIMEOUT_MS,
  type Bus,
  type BusError,
  type BusEvents,
  type BusHandler,
  type BusResponder,
  type BusStatus,
  type RequestOptions,
  type Subscription,
} from "./bus.js";
import { systemClock, type Clock, type TimerHandle } from "@livecount/runtime";
import { BusEventListeners } from "./bus_events.js";
import { describeFailure, RESPONDER_FAILURE_CODE, responderError } from "./responder_failure.js";
import { leaveServer } from "./nats_server_move.js";
import { isRefusal, toBusError, tooLarge } from "./nats_errors.js";
import { assertQueueName, assertSubject, assertSubjectPattern } from "./subject_syntax.js";

/** The part of a pino logger this bus uses; a pino `Logger` fits. */
export interface BusLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/**
 * Pause between reconnect attempts to one server, in milliseconds (nats.js adds up to 100 ms of
 * jitter). Short, because presence leases are seconds long; nats.js's default is 2000.
 */
export const DEFAULT_RECONNECT_TIME_WAIT_MS = 500;

/**
 * Interval of client pings, in milliseconds. With MAX_PINGS_OUT a dead server behind a silent
 * network is noticed within about 3 intervals instead of nats.js's 4 minutes.
 */
export const DEFAULT_PING_INTERVAL_MS = 10_000;

/** Unanswered pings before the connection is considered stale and re-established. */
const MAX_PINGS_OUT = 2;

/** Longest close() waits for in-flight messages to drain before it closes hard, in milliseconds. */
export const DEFAULT_DRAIN_TIMEOUT_MS = 5000;

/** Reconnect forever: a gateway or counter node without its bus is useless, so never give up. */
const RECONNECT_FOREVER = -1;
/** nats-server's `max_payload` unless configured (1 MiB): what a connection assumes before it hears. */
const NATS_DEFAULT_MAX_PAYLOAD = 1024 * 1024;

export interface NatsBusOptions {
  /** NATS URLs, e.g. "nats://127.0.0.1:4222" or a list for a cluster. */
  servers: string | string[];
  /** Connection name shown by the server's monitoring (connz) and logs. */
  name?: string;
  /** Connection events and handler failures are logged here; default nothing is logged. */
  logger?: BusLogger;
  /** Default DEFAULT_RECONNECT_TIME_WAIT_MS (500). */
  reconnectTimeWaitMs?: number;
  /** Default DEFAULT_PING_INTERVAL_MS (10000). */
  pingIntervalMs?: number;
  /** Default DEFAULT_DRAIN_TIMEOUT_MS (5000). */
  drainTimeoutMs?: number;
  /** Times the drain at close; default the system clock. (Request timeouts are nats.js's own.) */
  clock?: Clock;
  /**
   * Messages this connection publishes are not delivered to its own subscriptions (NATS `no_echo`).
   * For a process that never needs what it sends itself; default false.
   */
  noEcho?: boolean;
}

/** What nats.js calls with each message of a subscription. */
type MsgCallback = (err: NatsError | null, msg: Msg) => void;

/**
 * A subscription's handle: the connection and nats.js's subscription in one small object. A gateway
 * holds one per watched page, so a closure over them (and its context) would cost every page more.
 */
class NatsBusSubscription implements Subscription {
  readonly #nc: NatsConnection;
  readonly #sub: NatsSubscription;

  constructor(nc: NatsConnection, sub: NatsSubscription) {
    this.#nc = nc;
    this.#sub = sub;
  }

  unsubscribe(): void {
    if (this.#sub.isClosed() || this.#nc.isClosed()) return;
    try {
      this.#sub.unsubscribe();
    } catch {
      // The connection is closing: the server forgets the subscription anyway.
    }
  }

  async drain(): Promise<void> {
    if (this.#sub.isClosed() || this.#nc.isClosed()) return;
    try {
      await this.#sub.drain();
    } catch {
      // The connection is closing or closed: nothing more comes.
    }
  }
}

export class NatsBus implements Bus {
  readonly #nc: NatsConnection;
  readonly #log: BusLogger | undefined;
  readonly #drainTimeoutMs: number;
  readonly #clock: Clock;
  readonly #events = new BusEventListeners();
  /** Rejecters of requests in flight, so close() can fail them at once. */
  readonly #requests = new Set<(err: Error) => void>();
  #status: BusStatus = "connected";
  #closing: Promise<void> | undefined;

  private constructor(nc: NatsConnection, opts: NatsBusOptions) {
    this.#nc = nc;
    this.#log = opts.logger;
    this.#drainTimeoutMs = opts.drainTimeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS;
    this.#clock = opts.clock ?? systemClock;
    const maxPayload = nc.info?.max_payload ?? NATS_DEFAULT_MAX_PAYLOAD;
    if (maxPayload < NATS_DEFAULT_MAX_PAYLOAD)
      this.#log?.warn(
        { maxPayload, server: nc.getServer() },
        "the NATS server's max_payload is below its 1 MiB default: messages sized for it (idempotency keys, increment batches) will be refused",
      );
    void this.#watchStatus();
    void nc.closed().then((err) => this.#onClosed(err));
  }

  /**
   * Connects to NATS, reconnecting forever after that. Rejects with BusConnectError when the first
   * connection fails (the caller decides whether to wait: packages/cluster until_connected.ts). An
   * address may carry credentials: `nats://user:password@host:4222`, or a token `nats://token@host`.
   */
  static async connect(opts: NatsBusOptions): Promise<NatsBus> {
    try {
      // nats.js reads no credentials from an address: they go as options, for every server.
      const { servers, credentials } = withoutCredentials(opts.servers);
      const nc = await connect({
        servers,
        ...credentials,
        name: opts.name,
        maxReconnectAttempts: RECONNECT_FOREVER,
        reconnectTimeWait: opts.reconnectTimeWaitMs ?? DEFAULT_RECONNECT_TIME_WAIT_MS,
        pingInterval: opts.pingIntervalMs ?? DEFAULT_PING_INTERVAL_MS,
        maxPingOut: MAX_PINGS_OUT,
        noEcho: opts.noEcho ?? false,
        // Capturing a stack per request costs more than it tells: errors are mapped here anyway.
        noAsyncTraces: true,
      });
      return new NatsBus(nc, opts);
    } catch (err) {
      throw new BusConnectError(`cannot connect to NATS at ${maskedServers(opts.servers)}`, {
        cause: err,
        permanent: isRefusal(err),
      });
    }
  }

  get status(): BusStatus {
    return this.#status;
  }

  get maxPayload(): number {
    return this.#nc.info?.max_payload ?? NATS_DEFAULT_MAX_PAYLOAD;
  }

  publish(subject: string, data: Uint8Array): void {
    this.#assertOpen();
    assertSubject(subject);
    try {
      this.#nc.publish(subject, data);
    } catch (err) {
      throw (
        tooLarge(err, `publish on ${subject}`, data, this.maxPayload) ??
        toBusError(err, `publish on ${subject}`)
      );
    }
  }

  subscribe(subject: string, handler: BusHandler, opts?: { queue?: string }): Subscription {
    return this.#subscribe(subject, opts?.queue, (err, msg) => {
      if (err !== null) return this.#subscriptionFailed(err, subject);
      try {
        handler(msg.data, msg.subject);
      } catch (err) {
        // A throw must not reach nats.js: it would abort parsing of the rest of the socket data.
        this.#log?.error({ err, subject: msg.subject }, "bus handler threw");
      }
    });
  }

  serve(subject: string, responder: BusResponder, opts?: { queue?: string }): Subscription {
    return this.#subscribe(subject, opts?.queue, (err, msg) => {
      if (err !== null) return this.#subscriptionFailed(err, subject);
      this.#answer(msg, responder);
    });
  }

  async request(subject: string, data: Uint8Array, opts?: RequestOptions): Promise<Uint8Array> {
    this.#assertOpen();
    assertSubject(subject);
    // nats.js would buffer it until the connection is back, and the caller would wait its whole
    // timeout for an answer it can have at once: not now, try again.
    if (this.#status === "reconnecting")
      throw new BusDisconnectedError(`request on ${subject}: the bus is disconnected`);
    const timeout = opts?.timeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    const reply = await new Promise<Msg>((resolve, reject) => {
      this.#requests.add(reject);
      this.#nc
        .request(subject, data, { timeout })
        .then(resolve, (err: unknown) => reject(toBusError(err, `request on ${subject}`, timeout)))
        .finally(() => this.#requests.delete(reject));
    });
    const failure = reply.headers?.get(ServiceErrorHeader);
    if (failure) throw responderError(subject, failure);
    return reply.data;
  }

  on<E extends keyof BusEvents>(event: E, listener: BusEvents[E]): () => void {
    return this.#events.on(event, listener);
  }

  /** Resolves once the server has processed everything sent so far (a PING/PONG round trip). */
  async flush(): Promise<void> {
    this.#assertOpen();
    try {
      await this.#nc.flush();
    } catch (err) {
      throw toBusError(err, "flush");
    }
  }

  reconnect(): boolean {
    if (this.#closing !== undefined || this.#status !== "connected") return false;
    const server = this.#nc.getServer();
    if (!leaveServer(this.#nc)) return false;
    this.#log?.warn({ server }, "bus server silent; moving to another");
    // Reconnecting from now on, not from when nats.js reports the disconnect: a second call
    // meanwhile would move the list again, back to the server left.
    this.#status = "reconnecting";
    return true;
  }

  /**
   * Rejects pending requests with BusClosedError, then drains: unsubscribes, delivers messages
   * already received, flushes what was published. Closes hard after drainTimeoutMs (e.g. while the
   * server is unreachable).
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#failRequests(new BusClosedError("bus closed"));
    if (!this.#nc.isClosed()) {
      let timer: TimerHandle | undefined;
      const drained = this.#nc.drain().then(
        () => true,
        (err: unknown) => {
          this.#log?.warn({ err }, "bus drain failed");
          return false;
        },
      );
      const timedOut = new Promise<false>((resolve) => {
        timer = this.#clock.setTimeout(() => resolve(false), this.#drainTimeoutMs);
      });
      const clean = await Promise.race([drained, timedOut]);
      if (timer !== undefined) this.#clock.clearTimeout(timer);
      if (!clean) await this.#nc.close();
    }
    this.#status = "closed";
  }

  #assertOpen(): void {
    if (this.#closing !== undefined || this.#nc.isClosed()) throw new BusClosedError("bus is closed");
  }

  /** Subscribes with one callback per subscription, the only closure a subscription holds. */
  #subscribe(subject: string, queue: string | undefined, callback: MsgCallback): Subscription {
    this.#assertOpen();
    assertSubjectPattern(subject);
    if (queue !== undefined) assertQueueName(queue);
    let sub: NatsSubscription;
    try {
      // nats.js copies the options onto its subscription: an absent queue costs no property there.
      sub = this.#nc.subscribe(subject, queue === undefined ? { callback } : { queue, callback });
    } catch (err) {
      throw toBusError(err, `subscribe to ${subject}`);
    }
    return new NatsBusSubscription(this.#nc, sub);
  }

  #subscriptionFailed(err: Error, subject: string): void {
    this.#log?.error({ err, subject }, "bus subscription failed");
  }

  #answer(msg: Msg, responder: BusResponder): void {
    let result: Uint8Array | Promise<Uint8Array>;
    try {
      result = responder(msg.data, msg.subject);
    } catch (err) {
      this.#fail(msg, err);
      return;
    }
    if (result instanceof Uint8Array) {
      this.#reply(msg, result);
      return;
    }
    Promise.resolve(result).then(
      (bytes: unknown) => {
        if (bytes instanceof Uint8Array) this.#reply(msg, bytes);
        else this.#fail(msg, new TypeError(`responder returned ${typeof bytes}, not a Uint8Array`));
      },
      (err: unknown) => this.#fail(msg, err),
    );
  }

  #reply(msg: Msg, data: Uint8Array): void {
    try {
      msg.respond(data);
    } catch (err) {
      // A reply the server would refuse: the requester hears why now instead of timing out.
      const refused = tooLarge(err, `reply on ${msg.subject}`, data, this.maxPayload);
      if (refused !== undefined) return this.#fail(msg, refused);
      // Closed while the responder worked: the requester times out or was already rejected.
      this.#log?.warn({ err, subject: msg.subject }, "bus reply dropped");
    }
  }

  /** The reply-on-error rule (responder_failure.ts): an empty reply with service error headers. */
  #fail(msg: Msg, err: unknown): void {
    this.#log?.warn({ err, subject: msg.subject }, "bus responder failed");
    const h = headers();
    h.set(ServiceErrorHeader, describeFailure(err));
    h.set(ServiceErrorCodeHeader, RESPONDER_FAILURE_CODE);
    try {
      msg.respond(Empty, { headers: h });
    } catch {
      // Closed meanwhile, as in #reply.
    }
  }

  /** Rejects every request in flight with `err`. */
  #failRequests(err: BusError): void {
    for (const reject of [...this.#requests]) reject(err);
    this.#requests.clear();
  }

  async #watchStatus(): Promise<void> {
    try {
      for await (const s of this.#nc.status()) {
        switch (s.type) {
          case Events.Disconnect:
            if (this.#status === "connected") this.#status = "reconnecting";
            this.#log?.warn({ server: s.data }, "bus disconnected");
            this.#failRequests(
              new BusDisconnectedError("the bus disconnected while the request was in flight"),
            );
            break;
          case DebugEvents.Reconnecting:
            if (this.#status === "connected") this.#status = "reconnecting";
            break;
          case Events.Reconnect:
            if (this.#status === "reconnecting") this.#status = "connected";
            this.#log?.info({ server: s.data }, "bus reconnected");
            this.#events.emit("reconnected");
            break;
          case Events.LDM:
            this.#log?.warn({ server: s.data }, "bus server entering lame duck mode");
            break;
          case Events.Error:
            this.#log?.error({ code: s.data }, "bus server error");
            break;
          default:
            break;
        }
      }
    } catch (err) {
      this.#log?.error({ err }, "bus status watch failed");
    }
  }

  #onClosed(err: void | Error): void {
    this.#status = "closed";
    this.#failRequests(new BusClosedError("bus closed"));
    if (err !== undefined) this.#log?.error({ err }, "bus connection closed by error");
  }
}
