/**
 * Many pages at once through one DC's gateway, for the multi-DC convergence tests: likes in batches
 * of the publisher API (each under its own idempotency key, so a retried batch never counts twice),
 * totals and raw per-DC entries read over HTTP in chunks the API accepts, watchers spread over as
 * many sockets as the per-socket page limit needs, and the comparisons with what the test expects.
 */
import { CLUSTER_PUBLISHER_KEY } from "./cluster.js";
import { eventually, sleep } from "./eventually.js";
import type { TestDc } from "./multi_dc.js";
import { PublisherHttp, type ItemResult, type PageRaw, type PageTotals } from "./publisher_http.js";
import { TestClient } from "./ws_client.js";

/** The gateway's limits: items per increment batch, pages per read, pages per socket. */
const BATCH_ITEMS = 1000;
const READ_PAGES = 100;
const PAGES_PER_SOCKET = 64;
/** How long a batch is retried (with the same keys) until every item is acknowledged. */
const ACK_TIMEOUT_MS = 15_000;

/** Until values are exact when nothing failed; generous for a loaded 2-core machine. */
export const CONVERGE_MS = 15_000;
/**
 * How long a DC that may not serve yet (bootstrapping, its peer unreachable) is watched serving
 * nothing: twice what its counter nodes take to become ready when they need not wait (about 2 s).
 */
export const UNLINKED_WINDOW_MS = 4000;

/** What a page should show: viewers and likes. */
export interface Expected {
  readonly viewers: number;
  readonly likes: number;
}

export function pageIds(prefix: string, n: number): string[] {
  return Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
}

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** The publisher API of the DC's first gateway. */
export function publisherOf(dc: TestDc): PublisherHttp {
  return new PublisherHttp(dc.gateways[0]!.url, CLUSTER_PUBLISHER_KEY);
}

/**
 * Adds `likes.get(page)` to each page's `likes` in `dc`, one batch item per page under the key
 * `<key>:<page>`, and resolves once every item is acknowledged (durable in the DC's Redis).
 */
export async function addLikes(dc: TestDc, likes: ReadonlyMap<string, number>, key: string): Promise<void> {
  const http = publisherOf(dc);
  const items = [...likes].map(([page, change]) => ({
    page,
    counter: "likes",
    change,
    id: `${key}:${page}`,
  }));
  for (const batch of chunks(items, BATCH_ITEMS)) {
    await eventually(
      async () => {
        const res = await http.batch(batch);
        const failed = (res.body.results ?? []).filter((r: ItemResult) => "error" in r);
        if (res.status !== 200 || failed.length > 0)
          throw new Error(`batch answered ${res.status}: ${JSON.stringify(failed[0] ?? res.body)}`);
      },
      { timeoutMs: ACK_TIMEOUT_MS, intervalMs: 100, message: `likes (${key}) in ${dc.name}` },
    );
  }
}

/** One sample of a counter metric, summed over the DC's counter nodes. */
export async function counterMetric(dc: TestDc, name: string, labels: string): Promise<number> {
  const values = await Promise.all(dc.counters.map((c) => c.metric(name, labels)));
  return values.reduce((a, b) => a + b, 0);
}

/** The summed totals of `pages` in `dc`, by page. */
export async function readTotals(dc: TestDc, pages: readonly string[]): Promise<Map<string, PageTotals>> {
  const http = publisherOf(dc);
  const out = new Map<string, PageTotals>();
  for (const chunk of chunks(pages, READ_PAGES)) {
    for (const body of await http.totals(...chunk)) out.set(body.page, body);
  }
  return out;
}

/** Every DC's `{p, n}` entries of `pages` in `dc`, by page. */
export async function readRaw(dc: TestDc, pages: readonly string[]): Promise<Map<string, PageRaw>> {
  const http = publisherOf(dc);
  const out = new Map<string, PageRaw>();
  for (const chunk of chunks(pages, READ_PAGES)) {
    const query = chunk.map((p) => `page=${encodeURIComponent(p)}`).join("&") + "&raw=true";
    const res = await http.read<{ pages: PageRaw[] }>(query);
    if (res.status !== 200) throw new Error(`${dc.name}: raw read answered ${res.status}`);
    for (const body of res.body.pages) out.set(body.page, body);
  }
  return out;
}

/** Throws unless every page's raw `likes` entry of `owner` in `dc` is `{p: want(page), n: 0}`. */
export async function expectLikesEntries(
  dc: TestDc,
  owner: string,
  pages: readonly string[],
  want: (page: string) => number,
): Promise<void> {
  const raw = await readRaw(dc, pages);
  const entry = (page: string): { p: number; n: number } | undefined =>
    raw.get(page)?.counters.likes?.[owner];
  const wrong = pages.filter((page) => entry(page)?.p !== want(page) || entry(page)?.n !== 0);
  if (wrong.length > 0) {
    const page = wrong[0]!;
    throw new Error(
      `${dc.name}: ${owner}'s likes entry wrong on ${wrong.length} of ${pages.length} pages, e.g. ${page}: ` +
        `${JSON.stringify(entry(page))}, want {"p":${want(page)},"n":0}`,
    );
  }
}

/** The pages whose value is not `expected(page)`, each with what it shows instead (at most `max`). */
export function wrongPages(
  shown: (page: string) => { viewers: number; counters: Readonly<Record<string, number>> } | undefined,
  pages: readonly string[],
  expected: (page: string) => Expected,
  max = 5,
): { count: number; examples: string[] } {
  const examples: string[] = [];
  let count = 0;
  for (const page of pages) {
    const v = shown(page);
    const e = expected(page);
    if (v !== undefined && v.viewers === e.viewers && (v.counters.likes ?? 0) === e.likes) continue;
    count++;
    if (examples.length < max) {
      const got = v === undefined ? "nothing" : `viewers ${v.viewers}, likes ${v.counters.likes ?? 0}`;
      examples.push(`${page}: ${got}, want viewers ${e.viewers}, likes ${e.likes}`);
    }
  }
  return { count, examples };
}

/** Throws unless every page's HTTP read in `dc` shows `expected(page)`. */
export async function expectTotals(
  dc: TestDc,
  pages: readonly string[],
  expected: (page: string) => Expected,
): Promise<void> {
  const totals = await readTotals(dc, pages);
  const wrong = wrongPages((p) => totals.get(p), pages, expected);
  if (wrong.count > 0)
    throw new Error(
      `${dc.name}: ${wrong.count} of ${pages.length} pages wrong: ${wrong.examples.join("; ")}`,
    );
}

/**
 * For `forMs`, polls every counter node's /readyz and reads `pages` through the gateway: the nodes
 * must all say not ready, and no read may answer with a value (a DC that cannot answer for its pages
 * yet). A refusal must be retryable: 503 with Retry-After. Resolves with how many reads got each
 * status.
 */
export async function expectServesNothing(
  dc: TestDc,
  pages: readonly string[],
  forMs: number,
): Promise<Record<number, number>> {
  const http = publisherOf(dc);
  const until = Date.now() + forMs;
  const statuses: Record<number, number> = {};
  while (Date.now() < until) {
    for (const node of dc.counters) {
      if (!node.running) throw new Error(`${dc.name}: ${node.nodeId} exited:\n${node.logTail(40)}`);
      // Refused while the process is still starting: not ready either.
      const status = await fetch(`${node.url}/readyz`).then(
        (res) => res.status,
        () => 503,
      );
      if (status !== 503) throw new Error(`${dc.name}: ${node.nodeId} /readyz answered ${status}`);
    }
    const res = await http.read(pages.map((p) => `page=${encodeURIComponent(p)}`).join("&"));
    const refused = res.status === 503 && res.headers.get("retry-after") !== null;
    if (!refused) throw new Error(`${dc.name}: a read answered ${res.status} ${JSON.stringify(res.body)}`);
    statuses[res.status] = (statuses[res.status] ?? 0) + 1;
    await sleep(100);
  }
  return statuses;
}

/** Watchers of many pages in one DC: as many sockets as the per-socket page limit needs. */
export class PageWatchers {
  private constructor(
    readonly dc: TestDc,
    readonly sockets: ReadonlyMap<string, TestClient>,
  ) {}

  static async open(dc: TestDc, pages: readonly string[]): Promise<PageWatchers> {
    const sockets = new Map<string, TestClient>();
    for (const chunk of chunks(pages, PAGES_PER_SOCKET)) {
      const client = await TestClient.connect(dc.gateways[0]!.wsUrl);
      for (const page of chunk) {
        client.watch(page);
        sockets.set(page, client);
      }
    }
    return new PageWatchers(dc, sockets);
  }

  /** Throws unless the latest count frame of every page shows `expected(page)`. */
  expect(expected: (page: string) => Expected): void {
    const pages = [...this.sockets.keys()];
    const wrong = wrongPages((p) => this.sockets.get(p)!.lastCount(p), pages, expected);
    if (wrong.count > 0)
      throw new Error(
        `${this.dc.name} watchers: ${wrong.count} of ${pages.length} pages wrong: ${wrong.examples.join("; ")}`,
      );
  }

  async close(): Promise<void> {
    await Promise.all([...new Set(this.sockets.values())].map((c) => c.terminate()));
  }
}
