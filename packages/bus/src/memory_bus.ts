/**
 * The in-process bus of the embedded default: a small broker with NATS semantics (subjects,
 * wildcards, queue groups, request/reply, no-responders) inside one process.
 *
 * Delivery is asynchronous and in publish order: publish() routes the message at once, like a
 * broker, and queues one delivery per chosen subscription on a single queue that is drained in a
 * microtask. Every subscription therefore sees messages in the order they were published, and a
 * handler runs after the publisher's synchronous code, never inside it. A long drain yields to the
 * event loop every MAX_DELIVERIES_PER_TURN deliveries so timers and sockets keep running.
 */
import { systemClock, type Clock } from "@livecount/runtime";
import {
  BusClosedError,
  BusTimeoutError,
  DEFAULT_REQUEST_TIMEOUT_MS,
  NoRespondersError,
  type Bus,
  type BusEvents,
  type BusHandler,
  type BusResponder,
  type BusStatus,
  type RequestOptions,
  type Subscription,
} from "./bus.js";
import { BusEventListeners } from "./bus_events.js";
import { describeFailure, responderError } from "./responder_failure.js";
import {
  assertQueueName,
  assertSubject,
  assertSubjectPattern,
  hasWildcard,
  patternMatches,
  tokensOf,
} from "./subject_syntax.js";

/**
 * Messages queued for one subscription before new ones are dropped and `slowConsumer` is emitted.
 * The same default as the NATS Go client's per-subscription pending limit.
 */
export const DEFAULT_MAX_PENDING_PER_SUBSCRIPTION = 512 * 1024;

/** Deliveries made before the drain yields to the event loop. */
const MAX_DELIVERIES_PER_TURN = 4096;

/** Consumed queue slots kept before the queue array is compacted. */
const COMPACT_AFTER = 1024;

export interface MemoryBusOptions {
  /** Times request timeouts and the yields between delivery batches; default the system clock. */
  clock?: Clock;
  /**
   * Messages queued for one subscription before further ones are dropped, in messages; default
   * DEFAULT_MAX_PENDING_PER_SUBSCRIPTION (524288). `slowConsumer` is emitted when dropping starts,
   * and again if it starts again after the backlog fell to half the limit.
   */
  maxPendingPerSubscription?: number;
}

type ReplyTo = (reply: Uint8Array | Error) => void;

interface Entry {
  readonly subject: string;
  /** Tokens of a wildcard pattern; undefined for a literal subject, found by exact lookup. */
  readonly tokens: readonly string[] | undefined;
  readonly queue: string | undefined;
  readonly handler: BusHandler | undefined;
  readonly responder: BusResponder | undefined;
  active: boolean;
  /** Deliveries queued and not yet made. */
  pending: number;
  /** Dropping messages since the backlog hit the limit. */
  slow: boolean;
}

interface Delivery {
  readonly entry: Entry;
  readonly data: Uint8Array;
  readonly subject: string;
  readonly reply: ReplyTo | undefined;
}

export class MemoryBus implements Bus {
  readonly #clock: Clock;
  readonly #maxPending: number;
  readonly #events = new BusEventListeners();
  readonly #exact = new Map<string, Set<Entry>>();
  readonly #wildcards = new Set<Entry>();
  /** Next member index per queue group name, for round robin. */
  readonly #queueCursors = new Map<string, number>();
  readonly #requests = new Set<(err: Error) => void>();
  #deliveries: (Delivery | undefined)[] = [];
  #head = 0;
  #draining = false;
  #idleWaiters: (() => void)[] = [];
  #status: BusStatus = "connected";
  #closing: Promise<void> | undefined;

  constructor(opts: MemoryBusOptions = {}) {
    this.#clock = opts.clock ?? systemClock;
    this.#maxPending = opts.maxPendingPerSubscription ?? DEFAULT_MAX_PENDING_PER_SUBSCRIPTION;
    if (!Number.isInteger(this.#maxPending) || this.#maxPending < 1) {
      throw new RangeError(`maxPendingPerSubscription must be a positive integer, got ${this.#maxPending}`);
    }
  }

  get status(): BusStatus {
    return this.#status;
  }

  /** In one process nothing caps a message. */
  get maxPayload(): number {
    return Infinity;
  }

  publish(subject: string, data: Uint8Array): void {
    this.#assertOpen();
    assertSubject(subject);
    this.#route(subject, data, undefined);
  }

  subscribe(subject: string, handler: BusHandler, opts?: { queue?: string }): Subscription {
    return this.#add(subject, opts?.queue, handler, undefined);
  }

  serve(subject: string, responder: BusResponder, opts?: { queue?: string }): Subscription {
    return this.#add(subject, opts?.queue, undefined, responder);
  }

  request(subject: string, data: Uint8Array, opts?: RequestOptions): Promise<Uint8Array> {
    try {
      this.#assertOpen();
      assertSubject(subject);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    const timeoutMs = opts?.timeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    return new Promise<Uint8Array>((resolve, reject) => {
      const settle: ReplyTo = (reply) => {
        if (!this.#requests.delete(fail)) return;
        this.#clock.clearTimeout(timer);
        if (reply instanceof Error) reject(reply);
        else resolve(reply);
      };
      const fail = (err: Error): void => settle(err);
      const timer = this.#clock.setTimeout(
        () => settle(new BusTimeoutError(`request on ${subject} timed out after ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.#requests.add(fail);
      // Delivery is asynchronous, so no reply can settle the request before this line.
      if (this.#route(subject, data, settle) === 0) {
        settle(new NoRespondersError(`request on ${subject}: no responders`));
      }
    });
  }

  on<E extends keyof BusEvents>(event: E, listener: BusEvents[E]): () => void {
    return this.#events.on(event, listener);
  }

  /** Resolves once every message published so far has been delivered (handlers ran). */
  flush(): Promise<void> {
    if (this.#closing !== undefined) return Promise.reject(new BusClosedError("bus is closed"));
    return this.#idle();
  }

  /** No broker to move away from: every subscriber is in this process. */
  reconnect(): boolean {
    return false;
  }

  /** Rejects pending requests, delivers what was already published, then stops all delivery. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    const closed = new BusClosedError("bus closed");
    for (const fail of [...this.#requests]) fail(closed);
    await this.#idle();
    for (const set of this.#exact.values()) for (const entry of set) entry.active = false;
    for (const entry of this.#wildcards) entry.active = false;
    this.#exact.clear();
    this.#wildcards.clear();
    this.#status = "closed";
  }

  #assertOpen(): void {
    if (this.#closing !== undefined) throw new BusClosedError("bus is closed");
  }

  #add(
    subject: string,
    queue: string | undefined,
    handler: BusHandler | undefined,
    responder: BusResponder | undefined,
  ): Subscription {
    this.#assertOpen();
    assertSubjectPattern(subject);
    if (queue !== undefined) assertQueueName(queue);
    const entry: Entry = {
      subject,
      tokens: hasWildcard(subject) ? tokensOf(subject) : undefined,
      queue,
      handler,
      responder,
      active: true,
      pending: 0,
      slow: false,
    };
    if (entry.tokens !== undefined) {
      this.#wildcards.add(entry);
    } else {
      let set = this.#exact.get(subject);
      if (set === undefined) {
        set = new Set();
        this.#exact.set(subject, set);
      }
      set.add(entry);
    }
    return { unsubscribe: () => this.#remove(entry) };
  }

  #remove(entry: Entry): void {
    if (!entry.active) return;
    entry.active = false;
    if (entry.tokens !== undefined) {
      this.#wildcards.delete(entry);
      return;
    }
    const set = this.#exact.get(entry.subject);
    if (set === undefined) return;
    set.delete(entry);
    if (set.size === 0) this.#exact.delete(entry.subject);
  }

  /** Queues the message for every matching subscription; returns how many matched. */
  #route(subject: string, data: Uint8Array, reply: ReplyTo | undefined): number {
    let matched = 0;
    let groups: Map<string, Entry[]> | undefined;
    const visit = (entry: Entry): void => {
      matched++;
      if (entry.queue === undefined) {
        this.#enqueue(entry, data, subject, reply);
        return;
      }
      groups ??= new Map();
      const members = groups.get(entry.queue);
      if (members === undefined) groups.set(entry.queue, [entry]);
      else members.push(entry);
    };
    const exact = this.#exact.get(subject);
    if (exact !== undefined) for (const entry of exact) visit(entry);
    if (this.#wildcards.size > 0) {
      const tokens = tokensOf(subject);
      for (const entry of this.#wildcards) {
        if (patternMatches(entry.tokens as readonly string[], tokens)) visit(entry);
      }
    }
    if (groups !== undefined) {
      for (const [queue, members] of groups) {
        const cursor = this.#queueCursors.get(queue) ?? 0;
        this.#queueCursors.set(queue, (cursor + 1) % Number.MAX_SAFE_INTEGER);
        this.#enqueue(members[cursor % members.length] as Entry, data, subject, reply);
      }
    }
    return matched;
  }

  #enqueue(entry: Entry, data: Uint8Array, subject: string, reply: ReplyTo | undefined): void {
    if (entry.pending >= this.#maxPending) {
      if (!entry.slow) {
        entry.slow = true;
        queueMicrotask(() => this.#events.emit("slowConsumer", entry.subject));
      }
      return;
    }
    entry.pending++;
    this.#deliveries.push({ entry, data, subject, reply });
    if (!this.#draining) {
      this.#draining = true;
      queueMicrotask(this.#drain);
    }
  }

  readonly #drain = (): void => {
    const queue = this.#deliveries;
    for (let budget = MAX_DELIVERIES_PER_TURN; this.#head < queue.length; budget--) {
      if (budget === 0) {
        this.#compact();
        this.#clock.defer(this.#drain);
        return;
      }
      const delivery = queue[this.#head] as Delivery;
      queue[this.#head++] = undefined;
      const { entry } = delivery;
      entry.pending--;
      if (entry.slow && entry.pending <= this.#maxPending / 2) entry.slow = false;
      if (entry.active) this.#deliver(delivery);
    }
    this.#deliveries = [];
    this.#head = 0;
    this.#draining = false;
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const resolve of waiters) resolve();
  };

  #compact(): void {
    if (this.#head < COMPACT_AFTER) return;
    this.#deliveries = this.#deliveries.slice(this.#head);
    this.#head = 0;
  }

  #deliver({ entry, data, subject, reply }: Delivery): void {
    if (entry.handler !== undefined) {
      try {
        entry.handler(data, subject);
      } catch {
        // Isolated by contract: a handler's bug must not stop delivery to anybody else.
      }
      return;
    }
    if (entry.responder === undefined) return;
    let result: Uint8Array | Promise<Uint8Array>;
    try {
      result = entry.responder(data, subject);
    } catch (err) {
      reply?.(responderError(subject, describeFailure(err), err));
      return;
    }
    if (result instanceof Uint8Array) {
      reply?.(result);
      return;
    }
    Promise.resolve(result).then(
      (bytes) => reply?.(checkReply(subject, bytes)),
      (err: unknown) => reply?.(responderError(subject, describeFailure(err), err)),
    );
  }

  #idle(): Promise<void> {
    if (!this.#draining) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }
}

function checkReply(subject: string, reply: unknown): Uint8Array | Error {
  if (reply instanceof Uint8Array) return reply;
  const err = new TypeError(`responder returned ${typeof reply}, not a Uint8Array`);
  return responderError(subject, describeFailure(err), err);
}
