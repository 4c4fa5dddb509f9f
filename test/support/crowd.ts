/**
 * A small, deterministic audience for failure tests: named viewers on named gateways (one socket
 * each), and the truth they make. A page's expected `viewers` is the number of distinct viewer ids
 * with an open socket on a gateway the test has not stopped (`gatewayGone`), as BRIEF.md invariant
 * 1 defines it. Unlike `Audience` (audience.ts) there is no randomness and no churn: the failure
 * tests change one thing at a time and time what follows.
 */
import { sleep } from "./eventually.js";
import { TestClient, type CountFrame } from "./ws_client.js";

/** How long a joining viewer waits for the count frame that answers its join. */
const JOIN_ANSWER_MS = 10_000;

interface Seat {
  readonly client: TestClient;
  readonly gateway: string;
  readonly page: string;
  readonly viewer: string;
  gone: boolean;
}

export class Crowd {
  readonly #seats: Seat[] = [];
  readonly #clients = new Set<TestClient>();

  /** Opens a socket to `wsUrl` and joins `page` as `viewer`; resolves once the join is answered. */
  async join(wsUrl: string, page: string, viewer: string): Promise<TestClient> {
    const client = await TestClient.connect(wsUrl);
    this.#clients.add(client);
    const from = client.received.length;
    client.join(page, viewer);
    await client.next((f) => f.type === "count" && f.page === page, from, JOIN_ANSWER_MS);
    this.#seats.push({ client, gateway: wsUrl, page, viewer, gone: false });
    return client;
  }

  /** `count` viewers `<prefix>-0..` of `page` through `wsUrl`. */
  async seat(wsUrl: string, page: string, prefix: string, count: number): Promise<void> {
    for (let i = 0; i < count; i++) await this.join(wsUrl, page, `${prefix}-${i}`);
  }

  /** A socket that only watches `pages`; resolves once every page has had its first frame. */
  async watcher(wsUrl: string, pages: readonly string[]): Promise<TestClient> {
    const client = await TestClient.connect(wsUrl);
    this.#clients.add(client);
    for (const page of pages) client.watch(page);
    for (const page of pages)
      await client.next((f) => f.type === "count" && f.page === page, 0, JOIN_ANSWER_MS);
    return client;
  }

  /** The gateway behind `wsUrl` was stopped or killed: its viewers no longer count in the truth. */
  gatewayGone(wsUrl: string): void {
    for (const seat of this.#seats) if (seat.gateway === wsUrl) seat.gone = true;
  }

  /** The test closed this viewer's socket: it no longer counts in the truth. */
  left(client: TestClient): void {
    for (const seat of this.#seats) if (seat.client === client) seat.gone = true;
  }

  /**
   * Distinct viewer ids of `page` with an open socket on a gateway still up, not counting those on
   * `unheard` (a gateway the others cannot hear now).
   */
  expected(page: string, unheard?: string): number {
    const viewers = new Set<string>();
    for (const seat of this.#seats)
      if (seat.page === page && !seat.gone && seat.gateway !== unheard) viewers.add(seat.viewer);
    return viewers.size;
  }

  /** Sockets of live gateways that the server closed although the test did not ask it to. */
  unexpectedCloses(): string[] {
    return this.#seats
      .filter((s) => !s.gone && s.client.closeEvent !== undefined)
      .map((s) => `${s.viewer} on ${s.page}: closed ${s.client.closeEvent!.code}`);
  }

  async close(): Promise<void> {
    await Promise.all([...this.#clients].map((c) => c.terminate()));
    this.#clients.clear();
  }
}

/**
 * Calls `fn` every `intervalMs` (after the previous call ends) until `stop()`, which resolves with
 * everything it returned, or rejects with its first failure (sampling ends there).
 */
export function sampleEvery<T>(intervalMs: number, fn: () => Promise<T>): { stop: () => Promise<T[]> } {
  const samples: T[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      samples.push(await fn());
      await sleep(intervalMs);
    }
  })();
  // Held here until stop() reports it, so a failure is never an unhandled rejection meanwhile.
  const ended = loop.then(
    () => undefined,
    (err: unknown) => ({ err }),
  );
  return {
    stop: async () => {
      running = false;
      const failure = await ended;
      if (failure !== undefined) throw failure.err;
      return samples;
    },
  };
}

/**
 * When `watcher`'s frames of `page` last became right and stayed so: the arrival of the first frame
 * from which every later frame satisfies `right`; undefined when the latest does not.
 */
export function settledAt(
  watcher: TestClient,
  page: string,
  right: (f: CountFrame) => boolean,
): number | undefined {
  let at: number | undefined;
  for (const r of watcher.received) {
    if (r.frame.type !== "count" || r.frame.page !== page) continue;
    at = right(r.frame) ? (at ?? r.at) : undefined;
  }
  return at;
}

/**
 * Starts `fn` every `intervalMs` without waiting for the previous call, so one call left waiting
 * (a request lost with a connection) does not hold the later ones back; `stop()` waits for every
 * call and resolves with their results in the order they were started, or rejects with the first
 * failure.
 */
export function startEvery<T>(intervalMs: number, fn: () => Promise<T>): { stop: () => Promise<T[]> } {
  type Outcome = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly err: unknown };
  const calls: Promise<Outcome>[] = [];
  const start = (): void => {
    calls.push(
      fn().then(
        (value) => ({ ok: true, value }),
        (err: unknown) => ({ ok: false, err }),
      ),
    );
  };
  start();
  const timer = setInterval(start, intervalMs);
  return {
    stop: async () => {
      clearInterval(timer);
      const outcomes = await Promise.all(calls);
      return outcomes.map((o) => {
        if (!o.ok) throw o.err;
        return o.value;
      });
    },
  };
}
