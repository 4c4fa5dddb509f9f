/**
 * What the clients of a test cluster hold, as the truth counts are checked against: viewers with
 * real WebSockets on real gateways (an `Audience`), watchers that record every count frame, and
 * publisher likes retried with their idempotency keys until acknowledged (a `LikeLedger`).
 *
 * The truth is what the clients did, never what the server did to them: a page's expected `viewers`
 * is the number of distinct viewer ids the test joined to it and has not made leave (a leave frame,
 * a close, a dropped connection), on gateways the test has not killed or stopped. A socket the
 * server closes on its own therefore still counts in the truth, and is reported as an unexpected
 * close that fails the check; so is a watcher closed under a gateway that kept running. Expected
 * likes is the number of distinct idempotency keys sent for the page. Randomness comes from a
 * seeded generator so a failing run can be replayed.
 */
import type { ClusterProcess, TestCluster } from "./cluster.js";
import { CLUSTER_PUBLISHER_KEY, OPERATOR_HEADERS } from "./cluster.js";
import { eventually, Irrecoverable, sleep } from "./eventually.js";
import { TestClient, type CountFrame } from "./ws_client.js";

/** mulberry32: a small seeded generator of floats in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function pick<T>(random: () => number, items: readonly T[]): T {
  if (items.length === 0) throw new Error("nothing to pick from");
  return items[Math.floor(random() * items.length)]!;
}

/** A socket the test opened to one incarnation of a gateway. */
interface Socket {
  readonly client: TestClient;
  readonly gateway: ClusterProcess;
  /** The gateway's incarnation (`ClusterProcess.starts`) the socket was opened to. */
  readonly incarnation: number;
}

/** One socket of one viewer joined to one page at one gateway. */
interface Seat extends Socket {
  readonly page: string;
  readonly viewer: string;
  /** The test made the viewer leave (leave frame, close or dropped connection). */
  left: boolean;
}

/** Whether the incarnation the socket was opened to has ended: the test killed, stopped or restarted it. */
function gatewayGone(socket: Pick<Socket, "gateway" | "incarnation">): boolean {
  return !socket.gateway.running || socket.gateway.starts !== socket.incarnation;
}

export type LeaveMode = "leave" | "close" | "terminate";

export interface AudienceOptions {
  /** Distinct viewer ids drawn from; a small pool makes the same id appear on several sockets. */
  readonly viewerPool?: number;
  /** Chance that a viewer also opens a socket to another gateway for the same page. */
  readonly otherGatewayChance?: number;
  /** Chance that a viewer opens a second socket on the same gateway (a second tab). */
  readonly secondTabChance?: number;
}

/** A background loop of joins and leaves; `stop()` waits for the step in progress. */
export interface Churn {
  /** Changes made so far. */
  readonly changes: number;
  /** Resolves once `n` more changes were made. */
  waitFor(n: number, timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export class Audience {
  readonly #cluster: TestCluster;
  readonly #random: () => number;
  readonly #options: Required<AudienceOptions>;
  readonly #seats = new Set<Seat>();
  readonly #watchers = new Map<ClusterProcess, Socket>();
  readonly #clients = new Set<TestClient>();

  constructor(
    cluster: TestCluster,
    readonly pages: readonly string[],
    random: () => number,
    options: AudienceOptions = {},
  ) {
    this.#cluster = cluster;
    this.#random = random;
    this.#options = {
      viewerPool: options.viewerPool ?? pages.length * 3,
      otherGatewayChance: options.otherGatewayChance ?? 0.3,
      secondTabChance: options.secondTabChance ?? 0.1,
    };
  }

  /** Distinct viewer ids the test joined to `page` and has not made leave, on gateways still up. */
  expected(page: string): number {
    const viewers = new Set<string>();
    for (const seat of this.#seats) if (seat.page === page && this.#present(seat)) viewers.add(seat.viewer);
    return viewers.size;
  }

  /** Sockets joined to a page that still count, over every page and gateway. */
  get sockets(): number {
    let n = 0;
    for (const seat of this.#seats) if (this.#present(seat)) n++;
    return n;
  }

  /** Seats whose socket is on `gateway` and still counts. */
  seatsOn(gateway: ClusterProcess): number {
    let n = 0;
    for (const seat of this.#seats) if (seat.gateway === gateway && this.#present(seat)) n++;
    return n;
  }

  /**
   * Opens a socket to `gateway` and joins `page` as `viewer`. Undefined when the gateway went down
   * while the socket opened (the test is killing it); any other refusal fails the test.
   */
  async join(gateway: ClusterProcess, page: string, viewer: string): Promise<Seat | undefined> {
    const incarnation = gateway.starts;
    let client: TestClient;
    try {
      client = await TestClient.connect(gateway.wsUrl);
    } catch (err) {
      if (gatewayGone({ gateway, incarnation })) return undefined;
      throw new Error(`${gateway.nodeId} refused a viewer's socket while up: ${String(err)}`);
    }
    this.#clients.add(client);
    client.join(page, viewer);
    const seat: Seat = { client, gateway, incarnation, page, viewer, left: false };
    this.#seats.add(seat);
    return seat;
  }

  /**
   * Sockets the server closed on its own: a viewer's the test had not made leave, or a watcher's,
   * while their gateway incarnation kept running. Each is a failure.
   */
  unexpectedCloses(): string[] {
    const out: string[] = [];
    const closedByServer = (socket: Socket): boolean =>
      socket.client.closeEvent !== undefined && !gatewayGone(socket);
    for (const seat of this.#seats) {
      if (!seat.left && closedByServer(seat)) {
        const e = seat.client.closeEvent!;
        out.push(
          `${seat.gateway.nodeId} closed ${seat.viewer}'s socket on ${seat.page} (${e.code} ${e.reason})`,
        );
      }
    }
    for (const watcher of this.#watchers.values()) {
      if (closedByServer(watcher)) {
        const e = watcher.client.closeEvent!;
        out.push(`${watcher.gateway.nodeId} closed the watcher (${e.code} ${e.reason})`);
      }
    }
    return out;
  }

  /**
   * Seats up to `maxPerPage` viewers on every page over the live gateways: some viewers with a socket
   * on each gateway, some with two tabs on one.
   */
  async populate(maxPerPage = 6): Promise<void> {
    const joins: Array<Promise<unknown>> = [];
    for (const page of this.pages) {
      const n = Math.floor(this.#random() * (maxPerPage + 1));
      for (let i = 0; i < n; i++) joins.push(...this.#joinViewer(page));
    }
    await Promise.all(joins);
  }

  /**
   * One random change: a viewer joins (maybe on two gateways) or one socket leaves. `only` limits it
   * to sockets on these gateways (default: every live one).
   */
  async step(only?: readonly ClusterProcess[]): Promise<void> {
    const on = (g: ClusterProcess): boolean => only === undefined || only.includes(g);
    const present = [...this.#seats].filter((s) => this.#present(s) && on(s.gateway));
    if (present.length > 0 && this.#random() < 0.5) {
      const modes: LeaveMode[] = ["leave", "close", "terminate"];
      await this.leave(pick(this.#random, present), pick(this.#random, modes));
    } else {
      await Promise.all(this.#joinViewer(pick(this.#random, this.pages), only));
    }
  }

  /** Runs `step(only)` in a loop until stopped, pausing `pauseMs` between steps. */
  churn(options: { readonly only?: readonly ClusterProcess[]; readonly pauseMs?: number } = {}): Churn {
    const { only, pauseMs = 10 } = options;
    let stopped = false;
    let changes = 0;
    const loop = (async () => {
      while (!stopped) {
        await this.step(only);
        changes++;
        await sleep(pauseMs);
      }
    })();
    return {
      get changes() {
        return changes;
      },
      waitFor: async (n, timeoutMs = 20_000) => {
        const target = changes + n;
        await eventually(
          () => {
            if (changes < target) throw new Error(`${changes} changes, waiting for ${target}`);
          },
          { timeoutMs, message: "churn" },
        );
      },
      stop: async () => {
        stopped = true;
        await loop;
      },
    };
  }

  async leave(seat: Seat, mode: LeaveMode): Promise<void> {
    seat.left = true;
    switch (mode) {
      case "leave":
        seat.client.leave(seat.page);
        // The socket stays open a moment after its leave, as a page switching widgets would.
        void sleep(50).then(() => seat.client.close());
        return;
      case "close":
        await seat.client.close();
        return;
      case "terminate":
        await seat.client.terminate();
        return;
    }
  }

  /**
   * Every socket on `gateway` joined to one of `pages` closes at once. Resolves with the number of
   * (page, viewer) pairs the gateway stopped holding: the presence transitions it forwards.
   */
  async leaveEverywhere(gateway: ClusterProcess, pages: ReadonlySet<string>): Promise<number> {
    const leaving = [...this.#seats].filter(
      (s) => s.gateway === gateway && pages.has(s.page) && this.#present(s),
    );
    await Promise.all(leaving.map((s) => this.leave(s, "close")));
    return new Set(leaving.map((s) => `${s.page}\u0000${s.viewer}`)).size;
  }

  /** Opens a watcher of every page on `gateway` and waits for its first frame of each. */
  async watch(gateway: ClusterProcess): Promise<TestClient> {
    const incarnation = gateway.starts;
    const client = await TestClient.connect(gateway.wsUrl);
    this.#clients.add(client);
    this.#watchers.set(gateway, { client, gateway, incarnation });
    for (const page of this.pages) client.watch(page);
    await eventually(
      () => {
        const missing = this.pages.filter((p) => client.lastCount(p) === undefined);
        if (missing.length > 0) throw new Error(`no frame yet for ${missing.length} pages`);
      },
      { timeoutMs: 10_000, message: `watcher on ${gateway.nodeId}` },
    );
    return client;
  }

  /**
   * The watcher on `gateway`'s current incarnation, if the test opened one. A watcher the server
   * closed is still returned (its frames stop): `unexpectedCloses()` reports it.
   */
  watcherOf(gateway: ClusterProcess): TestClient | undefined {
    const watcher = this.#watchers.get(gateway);
    return watcher === undefined || gatewayGone(watcher) ? undefined : watcher.client;
  }

  /** Drops every socket. */
  close(): void {
    for (const client of this.#clients) client.ws.terminate();
  }

  #present(seat: Seat): boolean {
    return !seat.left && !gatewayGone(seat);
  }

  #joinViewer(page: string, only?: readonly ClusterProcess[]): Array<Promise<unknown>> {
    const gateways = this.#cluster.liveGateways.filter((g) => only === undefined || only.includes(g));
    if (gateways.length === 0) return [];
    const viewer = `viewer-${Math.floor(this.#random() * this.#options.viewerPool)}`;
    const first = pick(this.#random, gateways);
    const joins: Array<Promise<unknown>> = [this.join(first, page, viewer)];
    const others = gateways.filter((g) => g !== first);
    if (others.length > 0 && this.#random() < this.#options.otherGatewayChance) {
      joins.push(this.join(pick(this.#random, others), page, viewer));
    }
    if (this.#random() < this.#options.secondTabChance) joins.push(this.join(first, page, viewer));
    return joins;
  }
}

/** The longest time `client` showed fewer viewers than `expected` on `page` in frames since `since`. */
export function longestDip(client: TestClient, page: string, since: number, expected: number): number {
  let longest = 0;
  let dipStart: number | undefined;
  for (const r of client.received) {
    if (r.at < since || r.frame.type !== "count" || r.frame.page !== page) continue;
    if (r.frame.viewers < expected) dipStart ??= r.at;
    else if (dipStart !== undefined) {
      longest = Math.max(longest, r.at - dipStart);
      dipStart = undefined;
    }
  }
  if (dipStart !== undefined) longest = Math.max(longest, Date.now() - dipStart);
  return longest;
}

/** GET /v1/pages/{page}/counter, decoded. */
export interface CounterRead {
  readonly page: string;
  readonly count: number;
  readonly viewers: number;
  readonly counters: Readonly<Record<string, number>>;
  readonly updated_at: number;
}

const REQUEST_TIMEOUT_MS = 5000;

export async function readCounter(gateway: ClusterProcess, page: string): Promise<CounterRead> {
  const res = await fetch(`${gateway.url}/v1/pages/${encodeURIComponent(page)}/counter`, {
    headers: OPERATOR_HEADERS,
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  if (res.status !== 200)
    throw new ReadRefused(res.status, `GET ${page} on ${gateway.nodeId}: ${res.status} ${await res.text()}`);
  return (await res.json()) as CounterRead;
}

/** A read answered with a status other than 200. */
export class ReadRefused extends Error {
  override name = "ReadRefused";
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

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

export interface ExactOptions {
  readonly cluster: TestCluster;
  readonly audience: Audience;
  /** When given, every page's likes must equal its distinct keys too. */
  readonly likes?: LikeLedger;
  readonly timeoutMs: number;
  /** Names the moment in the error, e.g. "after the takeover". */
  readonly when: string;
}

/**
 * Polls until every page reads exactly what the clients hold, through every live gateway's HTTP API
 * and every live watcher's last count frame. Resolves with how long it took.
 */
export async function expectExact(options: ExactOptions): Promise<number> {
  const { cluster, audience, likes, timeoutMs, when } = options;
  const started = Date.now();
  await eventually(
    async () => {
      const closes = audience.unexpectedCloses();
      if (closes.length > 0)
        throw new Irrecoverable(
          `${when}: ${closes.length} sockets closed by the server: ${closes.slice(0, 8).join("; ")}`,
        );
      const problems: string[] = [];
      const check = (what: string, got: number | undefined, want: number): void => {
        if (got !== want) problems.push(`${what} ${String(got)}, want ${want}`);
      };
      await Promise.all(
        cluster.liveGateways.flatMap((gateway) =>
          audience.pages.map(async (page) => {
            const want = audience.expected(page);
            const wantLikes = likes?.expected(page);
            try {
              const read = await readCounter(gateway, page);
              check(`${gateway.nodeId} GET ${page} viewers`, read.viewers, want);
              check(`${gateway.nodeId} GET ${page} count`, read.count, want);
              if (wantLikes !== undefined) {
                check(`${gateway.nodeId} GET ${page} likes`, read.counters[likes!.counter] ?? 0, wantLikes);
              }
            } catch (err) {
              problems.push(String(err));
            }
            const frame: CountFrame | undefined = audience.watcherOf(gateway)?.lastCount(page);
            if (audience.watcherOf(gateway) !== undefined) {
              check(`${gateway.nodeId} watcher ${page} viewers`, frame?.viewers, want);
              if (wantLikes !== undefined) {
                check(
                  `${gateway.nodeId} watcher ${page} likes`,
                  frame?.counters[likes!.counter] ?? 0,
                  wantLikes,
                );
              }
            }
          }),
        ),
      );
      if (problems.length > 0) {
        throw new Error(`${problems.length} mismatches: ${problems.slice(0, 8).join("; ")}`);
      }
    },
    { timeoutMs, intervalMs: 100, message: `every page exact ${when}` },
  );
  return Date.now() - started;
}

/** A background reader; `stop()` resolves with what it found wrong. */
export interface ReadMonitor {
  /** Reads answered with a value. */
  readonly reads: number;
  /** Reads that failed (refused while an owner could not answer, or a connection error), by reason. */
  readonly failures: Readonly<Record<string, number>>;
  stop(): Promise<string[]>;
}

/**
 * Reads `pages` through every live gateway in a loop and reports each read that showed fewer likes
 * than were acknowledged before it was sent: an acknowledged like is durable and its owner's, so
 * no owner may serve a value without it (a stale owner would). A read that fails is counted by
 * reason, not checked; a monitor that got no value at all reports that, so it cannot pass by
 * reading nothing.
 */
export function monitorLikeReads(
  cluster: TestCluster,
  likes: LikeLedger,
  pages: readonly string[],
): ReadMonitor {
  let stopped = false;
  let reads = 0;
  const failures: Record<string, number> = {};
  const problems: string[] = [];
  const loop = (async () => {
    while (!stopped) {
      await Promise.all(
        cluster.liveGateways.flatMap((gateway) =>
          pages.map(async (page) => {
            const floor = likes.acknowledged(page);
            let read: CounterRead;
            try {
              read = await readCounter(gateway, page);
            } catch (err) {
              const reason = err instanceof ReadRefused ? String(err.status) : "connection";
              failures[reason] = (failures[reason] ?? 0) + 1;
              return;
            }
            reads++;
            const value = read.counters[likes.counter] ?? 0;
            if (value < floor)
              problems.push(
                `${gateway.nodeId} read ${value} likes on ${page} after ${floor} were acknowledged`,
              );
          }),
        ),
      );
      await sleep(20);
    }
  })();
  return {
    get reads() {
      return reads;
    },
    failures,
    stop: async () => {
      stopped = true;
      await loop;
      if (reads === 0) problems.push(`no read answered with a value (failures: ${JSON.stringify(failures)})`);
      return problems;
    },
  };
}
