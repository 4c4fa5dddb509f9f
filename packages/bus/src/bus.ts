/**
 * The message bus between gateways and counter nodes. Subjects follow NATS rules: tokens separated
 * by '.', '*' matches one token, '>' matches the rest. Two implementations: in-memory (the embedded
 * default) and NATS. Both behave the same on everything below; `bus_contract.ts` in the tests runs
 * one suite against both.
 */

/**
 * Receives one message. Handlers should not throw: a throw is caught and dropped so it never breaks
 * delivery to other subscribers or later messages (the NATS bus logs it).
 */
export type BusHandler = (data: Uint8Array, subject: string) => void;

/**
 * Answers a request; the returned bytes are the reply (an empty reply is a valid reply). A thrown or
 * rejected error becomes a failed request: the requester's promise rejects with ResponderError, whose
 * message carries the responder's error name and message. Responders that want a structured error
 * (an `ErrorReply` with a stable code) return it as a normal reply instead of throwing. A reply longer
 * than the broker takes fails the request the same way (PayloadTooLargeError), not by silence.
 */
export type BusResponder = (data: Uint8Array, subject: string) => Uint8Array | Promise<Uint8Array>;

export interface Subscription {
  /** Stops delivery at once, also of messages already queued for this subscription. Idempotent. */
  unsubscribe(): void;
  /**
   * Stops new deliveries and resolves once every message already sent to this subscriber was
   * handled (NATS's drain: what the server sent before it heard the unsubscribe is not lost).
   * Absent where nothing is in flight between a broker and the process (MemoryBus).
   */
  drain?(): Promise<void>;
}

/** How long a request waits for its reply unless told otherwise, in milliseconds. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 2000;

export interface RequestOptions {
  /** Give up after this long, in milliseconds; default DEFAULT_REQUEST_TIMEOUT_MS (2000). */
  timeoutMs?: number;
}

export type BusStatus = "connected" | "reconnecting" | "closed";

export interface BusEvents {
  /** The connection came back after an outage: subscribers may have missed messages. */
  reconnected(): void;
  /**
   * Messages were dropped for a subscription that could not keep up, while the connection stayed
   * up; `subject` is the subscription's subject (possibly a wildcard). A broker that handles a slow
   * consumer by closing its connection (nats-server does) reports `reconnected` instead.
   */
  slowConsumer(subject: string): void;
}

export interface Bus {
  /**
   * Throws InvalidSubjectError for a subject that is not a literal NATS subject, BusClosedError after
   * close, PayloadTooLargeError for more than the broker takes. What is published while the
   * connection is down, or left in it when it drops, may be lost (or, left in a frozen server, passed
   * on late if it thaws): the publisher, which alone hears `reconnected`, makes up for it (gateways
   * resync; counter nodes say so in their heartbeats), and requests fail and are retried.
   */
  publish(subject: string, data: Uint8Array): void;
  /**
   * The most bytes one message may carry now: the connected NATS server's `max_payload` (1 MiB by
   * default), Infinity for the in-memory bus. Senders of messages that grow with what they carry
   * cut them below it.
   */
  readonly maxPayload: number;
  /** With `queue`, one member of the queue group (by name, across matching subscriptions) gets each message. */
  subscribe(subject: string, handler: BusHandler, opts?: { queue?: string }): Subscription;
  /** Serves request/reply on a subject. With `queue`, one member of the queue group answers. */
  serve(subject: string, responder: BusResponder, opts?: { queue?: string }): Subscription;
  /**
   * Sends a request and resolves with the reply; rejects with BusTimeoutError, NoRespondersError (no
   * subscription at all matches the subject), ResponderError (the responder threw), BusClosedError or
   * BusDisconnectedError (the broker connection is down, or dropped while the request was in flight).
   * A subject with subscribers but no responder times out, as on NATS.
   */
  request(subject: string, data: Uint8Array, opts?: RequestOptions): Promise<Uint8Array>;
  /** Returns a function that removes the listener. A throwing listener is isolated like a handler. */
  on<E extends keyof BusEvents>(event: E, listener: BusEvents[E]): () => void;
  readonly status: BusStatus;
  /** Resolves once everything published so far has been handed to the broker. */
  flush(): Promise<void>;
  /**
   * Drops the connection to the broker and dials another server of its cluster: for a process whose
   * server stopped answering while keeping the connection open (frozen, or cut off by a network that
   * drops packets), which no disconnect would ever move elsewhere. Requests in flight fail with
   * BusDisconnectedError, and `reconnected` follows as after any outage. What the server left holds
   * of what this process sent it is passed on if it ever comes back (thawed), late: messages that
   * matter say which connection they came over (presence epochs, NodeHeartbeat.reconnects).
   * Returns whether it did: not with a single server known (where it could only dial the same one),
   * while already reconnecting, after close, or on a bus without a broker.
   */
  reconnect(): boolean;
  /** Rejects pending requests with BusClosedError, then drains. Idempotent. */
  close(): Promise<void>;
}

export class BusError extends Error {
  override name = "BusError";
}

/**
 * The first connection to the broker failed. `permanent`: the broker refused the credentials, or the
 * address cannot be one; no later try can mend it. Otherwise it may just not be up yet.
 */
export class BusConnectError extends BusError {
  override name = "BusConnectError";
  readonly permanent: boolean;

  constructor(message: string, options: { readonly cause: unknown; readonly permanent: boolean }) {
    super(message, { cause: options.cause });
    this.permanent = options.permanent;
  }
}

export class BusTimeoutError extends BusError {
  override name = "BusTimeoutError";
}

export class NoRespondersError extends BusError {
  override name = "NoRespondersError";
}

export class BusClosedError extends BusError {
  override name = "BusClosedError";
}

/**
 * The connection to the broker is down: a request made meanwhile is refused at once, and one in
 * flight when it dropped is failed then, since its reply may never come. Retryable: once the bus
 * reconnects, the same request goes through.
 */
export class BusDisconnectedError extends BusError {
  override name = "BusDisconnectedError";
}

/**
 * A message (a publish, or a responder's reply) is longer than the broker takes: NATS's
 * `max_payload` (1 MiB by default), the least of every server it would cross. Sending it again
 * fails the same way.
 */
export class PayloadTooLargeError extends BusError {
  override name = "PayloadTooLargeError";
}

/** The responder of a request threw or rejected; see BusResponder. */
export class ResponderError extends BusError {
  override name = "ResponderError";
}

/** A subject, subject pattern or subject token is malformed. */
export class InvalidSubjectError extends BusError {
  override name = "InvalidSubjectError";
}
