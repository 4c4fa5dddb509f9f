/**
 * A cluster under a fault, and the truth it must come back to (for the failure tests in
 * test/cluster): a `Scene` of viewers on both gateways (one viewer id on both), likes and a watcher
 * per gateway, with what "exact" means for it and when it became so; and samples of every
 * process's /readyz while a fault lasts.
 */
import { expect } from "vitest";
import { HashRing, partitionOf } from "@livecount/ring";
import { CLUSTER_PUBLISHER_KEY, TIMINGS, type ClusterProcess, type TestCluster } from "./cluster.js";
import { sampleEvery, settledAt, startEvery, type Crowd } from "./crowd.js";
import { eventually, sleep } from "./eventually.js";
import { PublisherHttp } from "./publisher_http.js";
import type { TestClient } from "./ws_client.js";

/** How often readiness and reads are sampled while a fault lasts. */
export const SAMPLE_MS = 50;
/** Until a page is exact when nothing failed. */
const CONVERGE_MS = 10_000;

/** The status of /readyz, or 0 when the process does not answer at all. */
export async function readyz(p: ClusterProcess): Promise<number> {
  return fetch(`${p.url}/readyz`).then(
    (res) => res.status,
    () => 0,
  );
}

export function pageIds(prefix: string, n: number): string[] {
  return Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
}

export function expectAllRunning(cluster: TestCluster): void {
  for (const p of [...cluster.counters, ...cluster.gateways])
    expect(p.running, `${p.nodeId} still runs (exit: see its log)`).toBe(true);
}

/**
 * Viewers on both gateways of a cluster (one viewer id on both, so deduplication across gateways is
 * part of what must come back), likes on every page, and a watcher on every gateway.
 */
export class Scene {
  readonly likes = new Map<string, number>();
  readonly watchers: TestClient[] = [];

  private constructor(
    readonly cluster: TestCluster,
    readonly crowd: Crowd,
    readonly pages: readonly string[],
  ) {}

  /**
   * Page i of `n` gets i + 1 viewers on the first gateway, the first of them on the second gateway
   * too, and one more there (i + 2 distinct viewers), and 2i + 1 likes.
   */
  static async seat(cluster: TestCluster, crowd: Crowd, prefix: string, n: number): Promise<Scene> {
    const scene = new Scene(cluster, crowd, pageIds(prefix, n));
    const [gw1, gw2] = cluster.gateways as [ClusterProcess, ClusterProcess];
    for (const [i, page] of scene.pages.entries()) {
      await crowd.seat(gw1.wsUrl, page, `${page}-a`, i + 1);
      await crowd.join(gw2.wsUrl, page, `${page}-a-0`);
      await crowd.join(gw2.wsUrl, page, `${page}-b`);
      scene.likes.set(page, 2 * i + 1);
    }
    const http = new PublisherHttp(gw1.url, CLUSTER_PUBLISHER_KEY);
    const items = scene.pages.map((page) => ({
      page,
      counter: "likes",
      change: scene.likes.get(page)!,
      id: `${prefix}:${page}`,
    }));
    const res = await http.batch(items);
    expect(res.status).toBe(200);
    expect(res.body.results.filter((r) => "error" in r)).toEqual([]);
    for (const g of cluster.gateways) scene.watchers.push(await crowd.watcher(g.wsUrl, scene.pages));
    await eventually(() => scene.expectExact(), { timeoutMs: CONVERGE_MS, message: "exact after seating" });
    return scene;
  }

  /** The scene's pages that `node` owns when every counter node of the cluster is on the ring. */
  pagesOwnedBy(node: string): string[] {
    const ring = new HashRing(
      this.cluster.counters.map((c) => c.nodeId),
      { partitions: TIMINGS.partitions, vnodes: TIMINGS.vnodes },
    );
    return this.pages.filter((p) => ring.ownerOf(partitionOf(p, TIMINGS.partitions)) === node);
  }

  #right(page: string, f: { viewers: number; counters: Readonly<Record<string, number>> }): boolean {
    return f.viewers === this.crowd.expected(page) && (f.counters.likes ?? 0) === this.likes.get(page);
  }

  /** Throws unless every watcher's latest frame of every page is exact. */
  expectFramesExact(): void {
    for (const [w, watcher] of this.watchers.entries())
      for (const page of this.pages) {
        const f = watcher.lastCount(page);
        if (f === undefined || !this.#right(page, f))
          throw new Error(
            `watcher ${w} ${page}: viewers ${f?.viewers} likes ${f?.counters.likes}, ` +
              `want ${this.crowd.expected(page)} and ${this.likes.get(page)}`,
          );
      }
  }

  /** Throws unless HTTP reads of every page through every gateway are exact. */
  async expectReadsExact(): Promise<void> {
    for (const g of this.cluster.gateways) {
      const totals = await new PublisherHttp(g.url, CLUSTER_PUBLISHER_KEY).totals(...this.pages);
      for (const t of totals)
        if (!this.#right(t.page, t))
          throw new Error(
            `${g.nodeId} read ${t.page}: viewers ${t.viewers} likes ${t.counters.likes}, ` +
              `want ${this.crowd.expected(t.page)} and ${this.likes.get(t.page)}`,
          );
    }
  }

  async expectExact(): Promise<void> {
    this.expectFramesExact();
    await this.expectReadsExact();
  }

  /** When the watchers' frames of every page last became exact and stayed so (undefined: not now). */
  framesSettledAt(): number | undefined {
    let latest = 0;
    for (const watcher of this.watchers)
      for (const page of this.pages) {
        const at = settledAt(watcher, page, (f) => this.#right(page, f));
        if (at === undefined) return undefined;
        latest = Math.max(latest, at);
      }
    return latest;
  }

  /** Smallest `viewers` any watcher saw of any page at or after `since`, relative to the truth. */
  deepestDip(since: number): { page: string; viewers: number; want: number } | undefined {
    let worst: { page: string; viewers: number; want: number } | undefined;
    for (const watcher of this.watchers)
      for (const r of watcher.received) {
        if (r.at < since || r.frame.type !== "count" || !this.pages.includes(r.frame.page)) continue;
        const want = this.crowd.expected(r.frame.page);
        if (
          r.frame.viewers < want &&
          (worst === undefined || r.frame.viewers - want < worst.viewers - worst.want)
        )
          worst = { page: r.frame.page, viewers: r.frame.viewers, want };
      }
    return worst;
  }

  /**
   * Waits until every page is exact through frames and reads and has stayed so for `stableMs`;
   * resolves with when it became so for good: the later of the watchers' settling frame and the
   * first read (by when it was sent) from which every read sent was exact. A read goes out every
   * SAMPLE_MS without waiting for the previous one, so a read left waiting by the fault does not
   * hold the others back.
   */
  async recovered(stableMs: number, timeoutMs: number): Promise<number> {
    const reads = startEvery(SAMPLE_MS, async () => {
      const sentAt = Date.now();
      const ok = await this.expectReadsExact().then(
        () => true,
        () => false,
      );
      return { sentAt, ok };
    });
    let answered: Array<{ sentAt: number; ok: boolean }> = [];
    try {
      await eventually(() => this.expectExact(), { timeoutMs, intervalMs: 20, message: "exact again" });
      await sleep(stableMs);
      await this.expectExact();
    } finally {
      answered = await reads.stop();
    }
    const lastWrong = answered.findLastIndex((r) => !r.ok);
    const readsAt = answered[lastWrong + 1]?.sentAt ?? Date.now();
    return Math.max(readsAt, this.framesSettledAt() ?? Infinity);
  }
}

export interface ReadySample {
  /** When the probes were sent and when the last answer came: each status held at some moment in between. */
  readonly sentAt: number;
  readonly doneAt: number;
  /** /readyz status by node id (0: no answer). */
  readonly status: ReadonlyMap<string, number>;
}

/** Samples every process's /readyz, all at once, every SAMPLE_MS until stopped. */
export function sampleReadiness(cluster: TestCluster): { stop: () => Promise<ReadySample[]> } {
  const all = [...cluster.counters, ...cluster.gateways];
  return sampleEvery(SAMPLE_MS, async () => {
    const sentAt = Date.now();
    const statuses = await Promise.all(all.map(readyz));
    return { sentAt, doneAt: Date.now(), status: new Map(all.map((p, i) => [p.nodeId, statuses[i]!])) };
  });
}

/**
 * Throws unless `p`'s /readyz was `want` in every sample taken wholly within [from, to), and some
 * sample was: a window nothing was sampled in proves nothing.
 */
export function expectReadiness(
  samples: readonly ReadySample[],
  p: ClusterProcess,
  want: number,
  from: number,
  to: number,
  what: string,
): void {
  const within = samples.filter((s) => s.sentAt >= from && s.doneAt < to);
  expect(within.length, `${p.nodeId} ${what}: samples in the window`).toBeGreaterThan(0);
  const wrong = within.filter((s) => s.status.get(p.nodeId) !== want);
  expect(
    wrong.map((s) => `${s.status.get(p.nodeId)} at +${s.sentAt - from} ms`),
    `${p.nodeId} ${what}: /readyz other than ${want}`,
  ).toEqual([]);
}

/** Throws unless each of `processes` answered 200 in every sample sent from `since + withinMs` on, the last one included. */
export function expectReadyAgain(
  samples: readonly ReadySample[],
  processes: readonly ClusterProcess[],
  since: number,
  withinMs: number,
  what: string,
): void {
  for (const p of processes) {
    const lastNotReady = samples.findLastIndex((s) => s.status.get(p.nodeId) !== 200);
    const readyAt = samples[lastNotReady + 1]?.sentAt;
    expect(readyAt, `${p.nodeId} ready again ${what}`).toBeDefined();
    expect(readyAt! - since, `${p.nodeId} ready again ${what}, ms`).toBeLessThanOrEqual(withinMs);
  }
}
