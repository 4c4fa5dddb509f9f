/**
 * Reads and watches of pages nobody views cost the counter node no state (issue 10, "Reads and
 * watches of unknown pages cost no state"), measured on real processes: a counter node on Redis
 * and NATS behind a gateway, read over HTTP and watched over WebSockets. Before, each read of a
 * new page id left a ~2 KB actor behind: 150,000 of them grew the node's RSS by 435 MB.
 */
import { readFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { Redis } from "ioredis";
import { expect, onTestFinished, test } from "vitest";
import { describeWithBinary } from "../support/binaries.js";
import { CLUSTER_PUBLISHER_KEY, TestCluster, type ClusterProcess } from "../support/cluster.js";
import { eventually, sleep } from "../support/eventually.js";
import { natsServerAvailable } from "../support/nats_server.js";
import type { PageTotals } from "../support/publisher_http.js";
import { redisServerAvailable } from "../support/redis_server.js";
import { TestClient } from "../support/ws_client.js";

const READS = 150_000;
/** Reads before the first RSS sample: the JIT, sockets and pools settle first. */
const WARM_UP_READS = 10_000;
const CONCURRENCY = 64;
/** Issue 10, "Done means": 150k unknown-page reads under +100 MB RSS. */
const MAX_RSS_GROWTH_MB = 100;
const WATCH_SOCKETS = 20;
const TEST_TIMEOUT_MS = 180_000;

/** The process's resident set, in MB, from /proc. */
function rssMb(process: ClusterProcess): number {
  const status = readFileSync(`/proc/${process.pid}/status`, "utf8");
  const kb = /^VmRSS:\s+(\d+) kB$/m.exec(status);
  if (kb === null) throw new Error(`no VmRSS for pid ${process.pid}`);
  return Number(kb[1]) / 1024;
}

/** GET of `path` on a kept-alive connection of `agent`: the status and the JSON body. */
function get(url: URL, agent: Agent, path: string): Promise<{ status: number; body: PageTotals }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path,
        agent,
        headers: { authorization: `Bearer ${CLUSTER_PUBLISHER_KEY}` },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as PageTotals }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end();
  });
}

/**
 * Reads `count` distinct never-written pages, CONCURRENCY at a time; resolves with the statuses
 * seen. Over node:http with kept-alive connections rather than fetch: 150,000 fetches cost this
 * process more CPU than the gateway spent answering them, on the same two cores.
 */
async function readUnknown(gatewayUrl: string, prefix: string, count: number): Promise<Map<number, number>> {
  const url = new URL(gatewayUrl);
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const statuses = new Map<number, number>();
  let next = 0;
  const reader = async (): Promise<void> => {
    for (let i = next++; i < count; i = next++) {
      const res = await get(url, agent, `/v1/pages/${prefix}-${i}/counter`);
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      if (res.status === 200 && (res.body.viewers !== 0 || Object.keys(res.body.counters).length !== 0))
        throw new Error(`unknown page ${prefix}-${i} read as ${JSON.stringify(res.body)}`);
    }
  };
  try {
    await Promise.all(Array.from({ length: CONCURRENCY }, reader));
  } finally {
    agent.destroy();
  }
  return statuses;
}

describeWithBinary(
  natsServerAvailable() && redisServerAvailable(),
  "nats-server and redis-server are required",
  "cluster - unknown pages",
  () => {
    test(
      "cluster - 150k reads of unknown pages grow the counter node by less than 100 MB and leave no actor and no key; watches of unknown pages leave none either",
      async () => {
        // The node may keep up to the default number of actors: the cap is not what bounds this.
        const cluster = await TestCluster.start({ counters: 1, gateways: 1 });
        onTestFinished(() => cluster.stop());
        const [counter] = cluster.counters as [ClusterProcess];
        const redis = new Redis(cluster.redis.url);
        onTestFinished(() => void redis.disconnect());
        const keysBefore = await redis.dbsize();

        const warm = await readUnknown(cluster.gateways[0]!.url, "warm", WARM_UP_READS);
        expect([...warm]).toEqual([[200, WARM_UP_READS]]);
        await sleep(500);
        const before = rssMb(counter);
        const startedAt = Date.now();
        const statuses = await readUnknown(cluster.gateways[0]!.url, "never-seen", READS);
        const seconds = (Date.now() - startedAt) / 1000;
        const after = rssMb(counter);
        const actors = await counter.metric("livecount_counter_actors");
        console.info(
          `unknown-page reads: ${JSON.stringify({ reads: READS, seconds, rssBeforeMb: before, rssAfterMb: after, actors })}`,
        );

        expect([...statuses], "every read answered 200 with an empty page").toEqual([[200, READS]]);
        expect(after - before, "counter RSS growth, MB").toBeLessThan(MAX_RSS_GROWTH_MB);
        expect(actors, "actors in memory after the reads").toBe(0);
        expect(await redis.dbsize(), "Redis keys after the reads").toBe(keysBefore);

        // Watches: every socket watches as many unknown pages as it may, and sees each one at zero.
        const clients: TestClient[] = [];
        onTestFinished(async () => {
          await Promise.all(clients.map((c) => c.terminate()));
        });
        const pagesPerSocket = 64;
        for (let s = 0; s < WATCH_SOCKETS; s++) {
          const client = await TestClient.connect(cluster.gateways[0]!.wsUrl);
          clients.push(client);
          for (let p = 0; p < pagesPerSocket; p++) client.watch(`watched-${s}-${p}`);
        }
        await eventually(() => {
          for (const [s, client] of clients.entries())
            for (let p = 0; p < pagesPerSocket; p++)
              expect(client.lastCount(`watched-${s}-${p}`)?.viewers, `watched-${s}-${p}`).toBe(0);
        });
        expect(await counter.metric("livecount_counter_actors"), "actors while watched").toBe(0);
        expect(await redis.dbsize(), "Redis keys while watched").toBe(keysBefore);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
