/**
 * The message bus between gateways and counter nodes. Subjects follow NATS rules: tokens separated
 * by '.', '*' matches one token, '>' matches the rest. Two implementations: in-memory (the embedded
 * default) and NATS.
 */
export type BusHandler = (data: Uint8Array, subject: string) => void;

/** Answers a request; the returned bytes are the reply. A thrown error becomes a failed request. */
export type BusResponder = (data: Uint8Array, subject: string) => Uint8Array | Promise<Uint8Array>;

export interface Subscription {
  unsubscribe(): void;
}

export interface RequestOptions {
  /** Give up after this long; default 2000. */
  timeoutMs?: number;
}

export type BusStatus = "connected" | "reconnecting" | "closed";

export interface BusEvents {
  /** The connection came back after an outage: subscribers may have missed messages. */
  reconnected(): void;
  /** The broker dropped messages for a subscriber that could not keep up. */
  slowConsumer(subject: string): void;
}

export interface Bus {
  publish(subject: string, data: Uint8Array): void;
  subscribe(subject: string, handler: BusHandler, opts?: { queue?: string }): Subscription;
  /** Serves request/reply on a subject. With `queue`, one member of the queue group answers. */
  serve(subject: string, responder: BusResponder, opts?: { queue?: string }): Subscription;
  /** Sends a request and resolves with the reply; rejects with BusTimeoutError or NoRespondersError. */
  request(subject: string, data: Uint8Array, opts?: RequestOptions): Promise<Uint8Array>;
  on<E extends keyof BusEvents>(event: E, listener: BusEvents[E]): () => void;
  readonly status: BusStatus;
  /** Resolves once everything published so far has been handed to the broker. */
  flush(): Promise<void>;
  close(): Promise<void>;
}

export class BusError extends Error {
  override name = "BusError";
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
