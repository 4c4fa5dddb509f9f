import { LogThrottle, fullJitterMs, type Clock, type Logger, type TimerHandle } from "@livecount/runtime";
import type { WebhookConfig } from "./webhook_config.js";
import { SIGNATURE_HEADER, signature, webhookBody, type OccupancyEvent } from "./webhook_event.js";
import type { WebhookMetrics } from "./webhook_metrics.js";

export type Fetch = (url: string, init: RequestInit) => Promise<Response>;

export interface WebhookSenderOptions {
  readonly config: WebhookConfig;
  /** This data center: every body says where it comes from. */
  readonly dc: string;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly metrics: WebhookMetrics;
  /** Node's global fetch unless a test injects faults. */
  readonly fetch?: Fetch;
  /** The jitter's randomness (Math.random). */
  readonly random?: () => number;
}

/** An event waiting for delivery: its bytes are fixed when it is created, so a retry sends them again. */
interface Delivery {
  readonly page: string;
  readonly partition: number;
  readonly body: string;
  readonly signature: string;
  /** When it was queued (monotonic: its age, against the max age, never grows by a clock step). */
  readonly createdAt: number;
  /** Attempts made so far. */
  attempts: number;
  /** Not before this (monotonic; a retry's backoff). */
  nextAt: number;
  /** Set while an attempt is in flight. */
  inFlight: AbortController | undefined;
}

type Failure = "network" | "timeout" | "status";

/**
 * Delivers occupancy events to the webhook URL: per page in order (a page's next event waits until
 * the one before it is delivered or given up), at least once (retried on network errors, timeouts
 * and non-2xx answers, with full-jitter exponential backoff, never once it is as old as the max
 * age), at most `concurrency` requests at once, at most `maxQueued` events held (past it the
 * oldest not being sent is dropped). All time goes through the clock, and every deadline is on its
 * monotonic reading: a wall clock stepping back delays no delivery.
 */
export class WebhookSender {
  readonly #o: WebhookSenderOptions;
  readonly #fetch: Fetch;
  readonly #random: () => number;
  /** Lines that can repeat per event, throttled (LogThrottle). */
  readonly #logs: LogThrottle;
  /** page -> its events, oldest first; the first is the one being sent or waiting to be. */
  readonly #pages = new Map<string, Delivery[]>();
  /** Every event held, oldest first: the cap drops from the front. */
  readonly #all = new Set<Delivery>();
  /** Pages whose first event may be sent now, in the order they became so. */
  readonly #ready = new Set<string>();
  /** Pages whose first event waits for its backoff or a hold. */
  readonly #timers = new Map<string, TimerHandle>();
  /** partition -> not before this (monotonic): a partition that just started serving here (see `hold`). */
  readonly #holds = new Map<number, number>();
  #inFlight = 0;
  #closing = false;
  #drained: (() => void) | undefined;

  constructor(options: WebhookSenderOptions) {
    this.#o = options;
    this.#fetch = options.fetch ?? ((url, init) => globalThis.fetch(url, init));
    this.#random = options.random ?? Math.random;
    this.#logs = new LogThrottle(undefined, () => options.clock.now());
  }

  /** Events held: waiting, backing off or being sent. */
  get queued(): number {
    return this.#all.size;
  }

  /** Queues an event behind the page's earlier ones. */
  send(event: OccupancyEvent): void {
    const { metrics, config, clock } = this.#o;
    metrics.events.inc({ type: event.type });
    if (this.#closing) {
      metrics.dropped.inc({ reason: "shutdown" });
      return;
    }
    const body = webhookBody(event, this.#o.dc);
    const now = clock.monotonic();
    const delivery: Delivery = {
      page: event.page,
      partition: event.partition,
      body,
      signature: signature(config.secret, body),
      createdAt: now,
      attempts: 0,
      nextAt: now,
      inFlight: undefined,
    };
    let queue = this.#pages.get(event.page);
    if (queue === undefined) this.#pages.set(event.page, (queue = []));
    queue.push(delivery);
    this.#all.add(delivery);
    if (queue.length === 1) this.#schedule(event.page);
    if (this.#all.size > config.maxQueued) this.#dropOldest();
    this.#pump();
  }

  /**
   * The partition just started serving here: its pages' events wait until `until` (the end of the
   * settle window), while a previous owner that stopped may still be delivering its last ones.
   */
  hold(partition: number, until: number): void {
    this.#holds.set(partition, until);
  }

  /**
   * Stops taking events and delivers what is held for at most `drainMs`; what is left then is
   * dropped (counted, logged).
   */
  async close(drainMs: number): Promise<void> {
    this.#closing = true;
    const { clock, metrics, logger } = this.#o;
    if (this.#all.size > 0) {
      await new Promise<void>((resolve) => {
        const timer = clock.setTimeout(resolve, drainMs);
        this.#drained = () => {
          clock.clearTimeout(timer);
          resolve();
        };
      });
      this.#drained = undefined;
    }
    const left = this.#all.size;
    for (const delivery of this.#all) delivery.inFlight?.abort();
    for (const timer of this.#timers.values()) clock.clearTimeout(timer);
    this.#timers.clear();
    this.#ready.clear();
    this.#pages.clear();
    this.#all.clear();
    if (left > 0) {
      metrics.dropped.inc({ reason: "shutdown" }, left);
      logger.warn({ dropped: left, drainMs }, "webhook events dropped at shutdown");
    }
  }

  /** Makes the page's first event ready now, or when its backoff or its partition's hold ends. */
  #schedule(page: string): void {
    const head = this.#pages.get(page)?.[0];
    if (head === undefined || head.inFlight !== undefined) return;
    const { clock } = this.#o;
    const hold = this.#holds.get(head.partition);
    if (hold !== undefined && hold <= clock.monotonic()) this.#holds.delete(head.partition);
    const at = Math.max(head.nextAt, hold ?? 0);
    const existing = this.#timers.get(page);
    if (existing !== undefined) clock.clearTimeout(existing);
    this.#timers.delete(page);
    if (at <= clock.monotonic()) {
      this.#ready.add(page);
      return;
    }
    this.#timers.set(
      page,
      clock.setTimeout(() => {
        this.#timers.delete(page);
        this.#schedule(page);
        this.#pump();
      }, at - clock.monotonic()),
    );
  }

  /**
   * Starts attempts for ready pages while fewer than `concurrency` are in flight. An event whose
   * turn comes once it is as old as the max age is given up unsent, so no request ever carries an
   * event older than that (a receiver may refuse older ones as replays).
   */
  #pump(): void {
    for (const page of this.#ready) {
      if (this.#inFlight >= this.#o.config.concurrency) return;
      this.#ready.delete(page);
      const head = this.#pages.get(page)?.[0];
      if (head === undefined || head.inFlight !== undefined) continue;
      if (this.#o.clock.monotonic() - head.createdAt >= this.#o.config.maxAgeMs) this.#giveUp(head, {});
      else void this.#attempt(head);
    }
  }

  async #attempt(delivery: Delivery): Promise<void> {
    const { clock, config } = this.#o;
    const abort = (delivery.inFlight = new AbortController());
    this.#inFlight++;
    delivery.attempts++;
    let timedOut = false;
    const timer = clock.setTimeout(() => {
      timedOut = true;
      abort.abort();
    }, config.timeoutMs);
    let failure: Failure | undefined;
    let detail: Record<string, unknown> = {};
    try {
      const res = await this.#fetch(config.url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "user-agent": "livecount-webhooks/1",
          [SIGNATURE_HEADER]: delivery.signature,
        },
        body: delivery.body,
        signal: abort.signal,
        // A redirect is an answer that is not 2xx: the event goes nowhere the operator did not name.
        redirect: "manual",
      });
      // Nothing is read from the answer but its status; its body must not hold the connection.
      await res.body?.cancel().catch(() => {});
      if (!res.ok) {
        failure = "status";
        detail = { status: res.status };
      }
    } catch (err) {
      failure = timedOut ? "timeout" : "network";
      detail = { err };
    } finally {
      clock.clearTimeout(timer);
      this.#inFlight--;
      delivery.inFlight = undefined;
    }
    // Dropped while in flight (shutdown): nothing is left to do with it.
    if (this.#all.has(delivery)) this.#settle(delivery, failure, detail);
    this.#pump();
    if (this.#all.size === 0) this.#drained?.();
  }

  #settle(delivery: Delivery, failure: Failure | undefined, detail: Record<string, unknown>): void {
    const { metrics, config, clock, logger } = this.#o;
    if (failure === undefined) {
      metrics.deliveries.inc({ result: "delivered" });
      this.#remove(delivery);
      return;
    }
    metrics.failures.inc({ reason: failure });
    const now = clock.monotonic();
    const fields = { ...detail, page: delivery.page, reason: failure, attempts: delivery.attempts };
    if (now - delivery.createdAt >= config.maxAgeMs) {
      this.#giveUp(delivery, fields);
      return;
    }
    metrics.retries.inc();
    this.#logs.log(logger, "warn", fields, "webhook delivery failed; retrying");
    delivery.nextAt =
      now + fullJitterMs(delivery.attempts - 1, config.retryMs, config.retryMaxMs, this.#random);
    this.#schedule(delivery.page);
  }

  /** Gives an event up (past the max age); the page's next one becomes its first. */
  #giveUp(delivery: Delivery, fields: Record<string, unknown>): void {
    const { metrics, config, logger } = this.#o;
    metrics.deliveries.inc({ result: "gave_up" });
    this.#logs.log(
      logger,
      "error",
      { ...fields, page: delivery.page, attempts: delivery.attempts, maxAgeMs: config.maxAgeMs },
      "webhook event given up",
    );
    this.#remove(delivery);
  }

  /** Past the cap: the oldest event not being sent goes (the one just queued, if all others are). */
  #dropOldest(): void {
    for (const delivery of this.#all) {
      if (delivery.inFlight !== undefined) continue;
      this.#remove(delivery);
      this.#o.metrics.dropped.inc({ reason: "queue_full" });
      this.#logs.log(
        this.#o.logger,
        "warn",
        { page: delivery.page, maxQueued: this.#o.config.maxQueued },
        "webhook queue full; oldest event dropped",
      );
      return;
    }
  }

  /** Takes an event out of the queue; the page's next one, if any, becomes its first. */
  #remove(delivery: Delivery): void {
    this.#all.delete(delivery);
    const { page } = delivery;
    const queue = this.#pages.get(page);
    if (queue === undefined) return;
    const index = queue.indexOf(delivery);
    if (index < 0) return;
    queue.splice(index, 1);
    if (index === 0) {
      this.#ready.delete(page);
      const timer = this.#timers.get(page);
      if (timer !== undefined) this.#o.clock.clearTimeout(timer);
      this.#timers.delete(page);
    }
    if (queue.length === 0) this.#pages.delete(page);
    else if (index === 0) this.#schedule(page);
  }
}
