/**
 * Reads of a test cluster's counters through its gateways' HTTP API, checked against what the
 * clients hold (audience.ts, like_ledger.ts): every page exact through every live gateway and
 * watcher, and no read showing fewer likes than were acknowledged before it was sent.
 */
import type { Audience } from "./audience.js";
import type { ClusterProcess, TestCluster } from "./cluster.js";
import { OPERATOR_HEADERS } from "./cluster.js";
import { eventually, Irrecoverable, sleep } from "./eventually.js";
import type { LikeLedger } from "./like_ledger.js";
import type { CountFrame } from "./ws_client.js";

/** GET /v1/pages/{page}/counter, decoded. */
export interface CounterRead {
  readonly page: string;
  readonly count: number;
  readonly viewers: number;
  readonly counters: Readonly<Record<string, number>>;
  readonly updated_at: number;
}

/** How long a read or a like may take before it counts as failed. */
export const REQUEST_TIMEOUT_MS = 5000;

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
