/**
 * The pieces fault tests with real processes share: a cluster per test (logs printed when it fails),
 * seeded randomness, an audience with watchers, background likes and churn, each stopped when the
 * test ends; the deadlines their timing promises are checked against.
 */
import { onTestFinished } from "vitest";
import { Audience, seededRandom, type AudienceOptions, type Churn } from "./audience.js";
import { TIMINGS, TestCluster, type ClusterProcess, type TestClusterOptions } from "./cluster.js";
import { pageIds } from "./cluster_scene.js";
import { eventually } from "./eventually.js";
import type { LikeRun } from "./like_ledger.js";

/** Starts a cluster for one test: stopped when it ends, every log printed when it fails. */
export async function startCluster(options: TestClusterOptions = {}): Promise<TestCluster> {
  const cluster = await TestCluster.start(options);
  // One hook, so the logs are read before stop() deletes them.
  onTestFinished(async ({ task }) => {
    const failed = task.result?.state === "fail";
    if (failed) {
      console.error(
        `\n----- logs of the failed test's processes (kept in ${cluster.logDir}) -----\n${cluster.logs()}\n`,
      );
    }
    await cluster.stop(failed);
  });
  return cluster;
}

/** A seeded generator; the seed is printed so a failing run can be replayed. */
export function random(name: string): () => number {
  const seed = Number(process.env.LIVECOUNT_TEST_SEED ?? Math.floor(Math.random() * 2 ** 31));
  console.info(`${name}: seed ${seed} (LIVECOUNT_TEST_SEED=${seed} replays it)`);
  return seededRandom(seed);
}

/**
 * An audience on `n` pages, closed after the test: viewers seated over both gateways and a watcher
 * on every gateway.
 */
export async function seatAudience(
  cluster: TestCluster,
  label: string,
  n: number,
  rnd: () => number,
  options?: AudienceOptions,
): Promise<Audience> {
  const audience = new Audience(cluster, pageIds(label, n), rnd, options);
  onTestFinished(() => audience.close());
  await audience.populate();
  await Promise.all(cluster.gateways.map((g) => audience.watch(g)));
  return audience;
}

/** Stops the likes when the test ends: abandoned if it failed, else once every key is acknowledged. */
export function finishLikes(run: LikeRun): () => Promise<void> {
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopped ??= run.stop());
  onTestFinished(async ({ task }) => {
    if (task.result?.state === "fail") await run.abort();
    else await stop();
  });
  return stop;
}

/** Joins and leaves in the background (on `only` these gateways), stopped when the test ends at the latest. */
export function startChurn(audience: Audience, only?: readonly ClusterProcess[]): Churn {
  const churn = audience.churn(only === undefined ? {} : { only });
  onTestFinished(() => churn.stop());
  return churn;
}

/**
 * Slack over the lease arithmetic, for every timing promise checked here: sweeps (every 250 ms at
 * most), lease renewals, a poll interval and a loaded 2-core machine. Leases are 1.5 to 3 s, so a
 * lease taken twice as long as configured cannot pass.
 */
export const SLACK_MS = 1500;
/** The gateway lease of the gateway-failure tests: twice the slack. */
export const GATEWAY_LEASE_MS = 3000;
/** Until every page is exact when nothing failed. */
export const CONVERGE_MS = 10_000;
export const TEST_TIMEOUT_MS = 90_000;
export const OWNED = "livecount_counter_partitions_owned";

/** Until `node` owns every partition of the cluster (its peers down or gone). */
export async function ownsEveryPartition(node: ClusterProcess, timeoutMs: number): Promise<void> {
  await eventually(
    async () => {
      const owned = await node.metric(OWNED);
      if (owned !== TIMINGS.partitions) throw new Error(`${node.nodeId} owns ${owned} partitions`);
    },
    { timeoutMs, intervalMs: 50, message: `${node.nodeId} owns every partition` },
  );
}
