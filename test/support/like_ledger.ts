/**
 * Publisher likes of a test cluster, as the truth likes are checked against (a `LikeLedger`): each
 * sent with an idempotency key and retried until acknowledged. A page's expected likes is the number
 * of distinct keys sent for it, whatever the server did to the requests.
 */
import { pick } from "./audience.js";
import type { TestCluster } from "./cluster.js";
import { CLUSTER_PUBLISHER_KEY } from "./cluster.js";
import { REQUEST_TIMEOUT_MS } from "./counter_reads.js";
import { eventually, sleep } from "./eventually.js";

export interface LikeStats {
  /** Requests sent, first tries and retries. */
  requests: number;
  /** Requests that failed (connection error or 5xx) and were retried. */
  retries: number;
  /** 200 answers replayed from an earlier application of the same key. */
  replayed: number;
}

/** Background likes; `stop()` waits until every key sent so far is acknowledged. */
export interface LikeRun {
  stop(): Promise<void>;
  /** Gives up on the keys in flight (after a failed test): stops at once. */
  abort(): Promise<void>;
}

/**
 * Publisher likes through the HTTP API with idempotency keys, each retried on any failure or 5xx
 * (through any live gateway) until answered 200. Some keys are sent again after their 200, and some
 * through both gateways at once: a key must count once whatever happens.
 */
export class LikeLedger {
  readonly stats: LikeStats = { requests: 0, retries: 0, replayed: 0 };
  readonly #cluster: TestCluster;
  readonly #random: () => number;
  /** page -> every key sent for it. */
  readonly #keys = new Map<string, Set<string>>();
  /** page -> keys answered 200. */
  readonly #acked = new Map<string, Set<string>>();
  #seq = 0;
  #aborted = false;

  constructor(
    cluster: TestCluster,
    readonly pages: readonly string[],
    random: () => number,
    readonly counter = "likes",
  ) {
    this.#cluster = cluster;
    this.#random = random;
  }

  /** Distinct keys sent for `page`: its likes once every one is acknowledged. */
  expected(page: string): number {
    return this.#keys.get(page)?.size ?? 0;
  }

  /** Keys of `page` acknowledged so far. */
  acknowledged(page: string): number {
    return this.#acked.get(page)?.size ?? 0;
  }

  get totalKeys(): number {
    let n = 0;
    for (const keys of this.#keys.values()) n += keys.size;
    return n;
  }

  get totalAcknowledged(): number {
    let n = 0;
    for (const keys of this.#acked.values()) n += keys.size;
    return n;
  }

  /** Resolves once `n` more keys were acknowledged. */
  async waitAcknowledged(n: number, timeoutMs = 30_000): Promise<void> {
    const target = this.totalAcknowledged + n;
    await eventually(
      () => {
        if (this.totalAcknowledged < target) throw new Error(`${this.totalAcknowledged} of ${target} likes`);
      },
      { timeoutMs, message: "likes acknowledged" },
    );
  }

  /** Likes `page` once under a fresh key (or `key`), retrying until acknowledged. */
  async like(page: string, key = `like-${++this.#seq}`): Promise<void> {
    let keys = this.#keys.get(page);
    if (keys === undefined) this.#keys.set(page, (keys = new Set()));
    keys.add(key);
    await this.#untilAcknowledged(page, key);
  }

  /** `concurrency` loops of likes on random pages, with repeats of acknowledged keys mixed in. */
  run(concurrency = 4, pauseMs = 5): LikeRun {
    let stopped = false;
    const sent: Array<[string, string]> = [];
    const loop = async (): Promise<void> => {
      while (!stopped) {
        const roll = this.#random();
        if (roll < 0.2 && sent.length > 0) {
          // A retry after success, e.g. the publisher never saw the 200.
          const [page, key] = pick(this.#random, sent);
          await this.#untilAcknowledged(page, key);
        } else if (roll < 0.3) {
          // The same like sent twice at once, through different gateways when there are two.
          const page = pick(this.#random, this.pages);
          const key = `like-${++this.#seq}`;
          await Promise.all([this.like(page, key), this.like(page, key)]);
          sent.push([page, key]);
        } else {
          const page = pick(this.#random, this.pages);
          const key = `like-${++this.#seq}`;
          await this.like(page, key);
          sent.push([page, key]);
        }
        await sleep(pauseMs);
      }
    };
    const loops = Array.from({ length: concurrency }, () => loop());
    return {
      stop: async () => {
        stopped = true;
        await Promise.all(loops);
      },
      abort: async () => {
        stopped = true;
        this.#aborted = true;
        await Promise.allSettled(loops);
      },
    };
  }

  async #untilAcknowledged(page: string, key: string, timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const path = `/v1/pages/${encodeURIComponent(page)}/counter`;
    const body = JSON.stringify({ action: "increment", counter: this.counter, by: 1 });
    for (let attempt = Math.floor(this.#random() * 2); ; attempt++) {
      const gateways = this.#cluster.liveGateways;
      let failure: string;
      if (gateways.length === 0) failure = "no live gateway";
      else {
        const gateway = gateways[attempt % gateways.length]!;
        this.stats.requests++;
        try {
          const res = await fetch(`${gateway.url}${path}`, {
            method: "PUT",
            headers: {
              authorization: `Bearer ${CLUSTER_PUBLISHER_KEY}`,
              "content-type": "application/json",
              "idempotency-key": key,
            },
            body,
            signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
          });
          const text = await res.text();
          if (res.status === 200) {
            if (res.headers.get("idempotent-replayed") === "true") this.stats.replayed++;
            let acked = this.#acked.get(page);
            if (acked === undefined) this.#acked.set(page, (acked = new Set()));
            acked.add(key);
            return;
          }
          if (res.status < 500) throw new Error(`PUT ${page} key ${key}: ${res.status} ${text}`);
          failure = `${res.status} ${text}`;
        } catch (err) {
          if (err instanceof Error && err.message.startsWith("PUT ")) throw err;
          failure = String(err);
        }
      }
      if (Date.now() > deadline) throw new Error(`like ${key} on ${page} never acknowledged: ${failure}`);
      if (this.#aborted) throw new Error(`like ${key} on ${page} abandoned: ${failure}`);
      this.stats.retries++;
      await sleep(50);
    }
  }
}
