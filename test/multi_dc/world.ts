/**
 * What the two-DC tests of multi_dc.test.ts and multi_dc_failover.test.ts share: two data centers
 * of real processes started once per file (MultiDc, two counter nodes and a gateway each), the
 * clients and the truth they make (World), and reads of every page through each DC's watcher and
 * HTTP API against that truth.
 */
import { afterAll, beforeAll, onTestFailed } from "vitest";
import { OPERATOR_HEADERS, CLUSTER_PUBLISHER_KEY } from "../support/cluster.js";
import { eventually } from "../support/eventually.js";
import { MultiDc, type TestDc } from "../support/multi_dc.js";
import { TestClient, type CountFrame } from "../support/ws_client.js";

/**
 * Slack over the lease arithmetic (DC lease 2 s, heartbeats every 100 ms) for a loaded 2-core
 * machine: a DC lease taken twice as long as configured cannot pass.
 */
export const SLACK_MS = 1500;
/** Until values are exact when nothing failed. */
export const CONVERGE_MS = 10_000;
/** Until a restarted DC (servers, Redis from its AOF, processes) shows the global truth. */
export const RESTART_CONVERGE_MS = 15_000;
export const TEST_TIMEOUT_MS = 90_000;

export interface Body {
  readonly page: string;
  readonly viewers: number;
  readonly counters: Readonly<Record<string, number>>;
  readonly dcs: readonly string[];
  readonly lag_ms: number;
}

export interface RawBody {
  readonly page: string;
  readonly viewers: Readonly<Record<string, { p: number; n: number }>>;
  readonly counters: Readonly<Record<string, Readonly<Record<string, { p: number; n: number }>>>>;
}

/** What a page should show: viewers and likes. */
export interface Expected {
  readonly viewers: number;
  readonly likes: number;
}

/**
 * The clients of the test and the truth they make: viewers per DC and page, likes per page (one
 * per distinct idempotency key), and a watcher per DC that records every count frame.
 */
export class World {
  readonly #viewers = new Map<string, Map<string, TestClient[]>>();
  readonly #likes = new Map<string, Set<string>>();
  readonly #clients = new Set<TestClient>();
  readonly watchers = new Map<string, TestClient>();
  #nextKey = 0;

  constructor(readonly multi: MultiDc) {}

  #seats(dc: string, page: string): TestClient[] {
    let byPage = this.#viewers.get(dc);
    if (byPage === undefined) this.#viewers.set(dc, (byPage = new Map()));
    let seats = byPage.get(page);
    if (seats === undefined) byPage.set(page, (seats = []));
    return seats;
  }

  /** Opens a socket to the DC's gateway and joins `page` as a new viewer id. */
  async join(dc: TestDc, page: string): Promise<void> {
    const client = await TestClient.connect(dc.gateways[0]!.wsUrl);
    this.#clients.add(client);
    const from = client.received.length;
    client.join(page, `${dc.name}-${page}-${this.#seats(dc.name, page).length}-${this.#nextKey++}`);
    await client.next((f) => f.type === "count" && f.page === page, from, CONVERGE_MS);
    this.#seats(dc.name, page).push(client);
  }

  /** The first `n` viewers of `page` in `dc` close their sockets. */
  async leave(dc: TestDc, page: string, n: number): Promise<void> {
    const seats = this.#seats(dc.name, page);
    for (const client of seats.splice(0, n)) {
      await client.close();
      this.#clients.delete(client);
    }
  }

  /** Every socket of a DC's viewers is gone (its gateway died): forget them. */
  forgetViewers(dc: TestDc): void {
    for (const seats of this.#viewers.get(dc.name)?.values() ?? []) {
      for (const client of seats) {
        void client.terminate();
        this.#clients.delete(client);
      }
    }
    this.#viewers.delete(dc.name);
  }

  viewers(dc: string, page: string): number {
    return this.#viewers.get(dc)?.get(page)?.length ?? 0;
  }

  /** One like on `page` through `dc`'s gateway with a fresh idempotency key, retried until acknowledged. */
  async like(dc: TestDc, page: string): Promise<void> {
    const key = `like-${dc.name}-${this.#nextKey++}`;
    await eventually(
      async () => {
        const res = await fetch(`${dc.gateways[0]!.url}/v1/pages/${encodeURIComponent(page)}/counter`, {
          method: "PUT",
          headers: {
            authorization: `Bearer ${CLUSTER_PUBLISHER_KEY}`,
            "content-type": "application/json",
            "idempotency-key": key,
          },
          body: JSON.stringify({ action: "increment", counter: "likes", by: 1 }),
        });
        if (res.status !== 200) throw new Error(`like answered ${res.status}: ${await res.text()}`);
      },
      { timeoutMs: CONVERGE_MS, intervalMs: 50, message: `like on ${page} in ${dc.name}` },
    );
    let keys = this.#likes.get(page);
    if (keys === undefined) this.#likes.set(page, (keys = new Set()));
    keys.add(key);
  }

  likes(page: string): number {
    return this.#likes.get(page)?.size ?? 0;
  }

  /** The global truth: every live DC's viewers, every like. */
  truth(page: string, liveDcs: readonly string[]): Expected {
    const viewers = liveDcs.reduce((sum, dc) => sum + this.viewers(dc, page), 0);
    return { viewers, likes: this.likes(page) };
  }

  /** A watcher in `dc` that watches `pages` (one socket per DC, opened on first use). */
  async watch(dc: TestDc, pages: readonly string[]): Promise<TestClient> {
    let watcher = this.watchers.get(dc.name);
    if (watcher === undefined || !watcher.isOpen) {
      watcher = await TestClient.connect(dc.gateways[0]!.wsUrl);
      this.#clients.add(watcher);
      this.watchers.set(dc.name, watcher);
    }
    for (const page of pages) watcher.watch(page);
    return watcher;
  }

  async close(): Promise<void> {
    await Promise.all([...this.#clients].map((c) => c.terminate()));
    this.#clients.clear();
  }
}

export async function readPages(dc: TestDc, pages: readonly string[], raw = false): Promise<Body[]> {
  const query = pages.map((p) => `page=${encodeURIComponent(p)}`).join("&") + (raw ? "&raw=true" : "");
  const res = await fetch(`${dc.gateways[0]!.url}/v1/counters?${query}`, { headers: OPERATOR_HEADERS });
  if (res.status !== 200) throw new Error(`${dc.name}: read answered ${res.status}: ${await res.text()}`);
  return ((await res.json()) as { pages: Body[] }).pages;
}

export async function readRaw(dc: TestDc, page: string): Promise<RawBody> {
  const res = await fetch(`${dc.gateways[0]!.url}/v1/counters?page=${encodeURIComponent(page)}&raw=true`, {
    headers: OPERATOR_HEADERS,
  });
  if (res.status !== 200) throw new Error(`${dc.name}: raw read answered ${res.status}`);
  return ((await res.json()) as { pages: RawBody[] }).pages[0]!;
}

function describeValue(
  v: { viewers: number; counters: Readonly<Record<string, number>> } | undefined,
): string {
  return v === undefined ? "nothing" : `viewers ${v.viewers}, likes ${v.counters.likes ?? 0}`;
}

export function matches(
  v: { viewers: number; counters: Readonly<Record<string, number>> },
  e: Expected,
): boolean {
  return v.viewers === e.viewers && (v.counters.likes ?? 0) === e.likes;
}

/** Throws unless every page's HTTP read in `dc` shows `expected(page)` (and `dcs`, when given). */
export async function expectReads(
  dc: TestDc,
  pages: readonly string[],
  expected: (page: string) => Expected,
  dcs?: readonly string[],
): Promise<Body[]> {
  const bodies = await readPages(dc, pages);
  for (const body of bodies) {
    const e = expected(body.page);
    if (!matches(body, e))
      throw new Error(
        `${dc.name} read ${body.page}: ${describeValue(body)}, want viewers ${e.viewers}, likes ${e.likes}`,
      );
    if (dcs !== undefined && body.dcs.join() !== dcs.join())
      throw new Error(`${dc.name} read ${body.page}: dcs ${body.dcs.join()}, want ${dcs.join()}`);
  }
  return bodies;
}

/** Throws unless the watcher's latest frame of every page shows `expected(page)` (and `dcs`). */
export function expectFrames(
  name: string,
  watcher: TestClient,
  pages: readonly string[],
  expected: (page: string) => Expected,
  dcs?: readonly string[],
): CountFrame[] {
  return pages.map((page) => {
    const last = watcher.lastCount(page);
    const e = expected(page);
    if (last === undefined || !matches(last, e))
      throw new Error(
        `${name} watcher ${page}: ${describeValue(last)}, want viewers ${e.viewers}, likes ${e.likes}`,
      );
    if (dcs !== undefined && (last.dcs ?? []).join() !== dcs.join())
      throw new Error(`${name} watcher ${page}: dcs ${(last.dcs ?? []).join()}, want ${dcs.join()}`);
    return last;
  });
}

/** Waits until `dc` shows `expected` for every page, through its watcher and through HTTP reads. */
export async function waitShows(
  world: World,
  dc: TestDc,
  pages: readonly string[],
  expected: (page: string) => Expected,
  options: { dcs?: readonly string[]; timeoutMs?: number; when: string },
): Promise<void> {
  const watcher = world.watchers.get(dc.name);
  if (watcher === undefined) throw new Error(`no watcher in ${dc.name}`);
  await eventually(
    async () => {
      expectFrames(dc.name, watcher, pages, expected, options.dcs);
      await expectReads(dc, pages, expected, options.dcs);
    },
    { timeoutMs: options.timeoutMs ?? CONVERGE_MS, intervalMs: 25, message: `${dc.name} ${options.when}` },
  );
}

/**
 * When the watcher's frames of every page last became equal to `expected` (and stayed so): the
 * arrival time of the frame that made it right, the latest over pages. Undefined while some page
 * is not right.
 */
export function convergedAt(
  watcher: TestClient,
  pages: readonly string[],
  expected: (page: string) => Expected,
): number | undefined {
  let latest = 0;
  for (const page of pages) {
    const e = expected(page);
    let at: number | undefined;
    for (const r of watcher.received) {
      if (r.frame.type !== "count" || r.frame.page !== page) continue;
      at = matches(r.frame, e) ? (at ?? r.at) : undefined;
    }
    if (at === undefined) return undefined;
    latest = Math.max(latest, at);
  }
  return latest;
}

/** The processes and clients of a file's tests, set before its first test. */
export interface TwoDcs {
  multi: MultiDc;
  world: World;
  dc1: TestDc;
  dc2: TestDc;
}

/**
 * Starts two DCs (two counter nodes and a gateway each) before the enclosing block's first test and
 * stops them after its last; `into` gets them. The returned function, called first in a test, prints
 * every process's log if that test fails.
 */
export function twoDataCenters(into: (dcs: TwoDcs) => void): () => void {
  let multi: MultiDc | undefined;
  let world: World | undefined;
  beforeAll(async () => {
    multi = await MultiDc.start({ counters: 2, gateways: 1 });
    world = new World(multi);
    into({ multi, world, dc1: multi.dc("dc1"), dc2: multi.dc("dc2") });
  }, 120_000);
  afterAll(async () => {
    await world?.close();
    await multi?.stop();
  }, 60_000);
  return () =>
    onTestFailed(() => {
      if (multi !== undefined)
        console.error(`\n----- logs of every process (kept in ${multi.logDir}) -----\n${multi.logs()}\n`);
    });
}
