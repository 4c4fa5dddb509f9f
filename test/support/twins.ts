/**
 * A second process under a cluster process's node id (a copied config, a supervisor that did not
 * wait for the first to exit), for the tests of one process per id.
 */
import { join } from "node:path";
import { onTestFinished } from "vitest";
import { ClusterProcess, type ExitStatus } from "./cluster.js";
import { sleep } from "./eventually.js";
import { freePort } from "./ports.js";

/**
 * The same kind, node id and environment as `p` on a port of its own, not started; killed after
 * the test, its log printed when the test failed (the cluster prints only its own processes').
 */
export async function twinOf(p: ClusterProcess, logDir: string): Promise<ClusterProcess> {
  const port = await freePort();
  const twin = new ClusterProcess(
    p.kind,
    p.nodeId,
    port,
    { ...p.env, LIVECOUNT_PORT: String(port) },
    join(logDir, `${p.nodeId}-twin.log`),
  );
  onTestFinished(async ({ task }) => {
    if (task.result?.state === "fail") console.error(`\n----- the twin -----\n${twin.logTail()}`);
    await twin.kill();
  });
  return twin;
}

/** How `p` exited, or "running" when it still runs after `ms`. */
export async function exitedWithin(p: ClusterProcess, ms: number): Promise<ExitStatus | "running"> {
  return Promise.race([p.exited, sleep(ms).then(() => "running" as const)]);
}
