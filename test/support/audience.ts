/**
 * What the viewers of a test cluster hold, as the truth counts are checked against: viewers with
 * real WebSockets on real gateways (an `Audience`), and watchers that record every count frame.
 * Publisher likes are in like_ledger.ts, and the reads checked against both in counter_reads.ts.
 *
 * The truth is what the clients did, never what the server did to them: a page's expected `viewers`
 * is the number of distinct viewer ids the test joined to it and has not made leave (a leave frame,
 * a close, a dropped connection), on gateways the test has not killed or stopped. A socket the
 * server closes on its own therefore still counts in the truth, and is reported as an unexpected
 * close that fails the check; so is a watcher closed under a gateway that kept running. Randomness
 * comes from a seeded generator so a failing run can be replayed.
 */
import type { ClusterProcess, TestCluster } from "./cluster.js";
import { eventually, sleep } from "./eventually.js";
import { TestClient } from "./ws_client.js";

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

/** An item of `items`, drawn with `random`. */
export function pick<T>(random: () => number, items: readonly T[]): T {
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
