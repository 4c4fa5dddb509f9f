/**
 * Which reconnects of the store's Redis connections found a server that restarted: only such a
 * server can have lost writes (its last second, with `appendfsync everysec`), and the counter node
 * then writes back what it holds (RecentKeys.restoreAll, ActorRegistry.rewriteOwn). A connection
 * that merely dropped (a network blip) finds the same run of the server, and nothing is lost.
 */
import { Cluster, type Redis } from "ioredis";

/**
 * Runs `listener` each time a server's connection is ready again after it dropped, to another run
 * of it (`run_id`, or one that cannot be read). On a cluster, each node's: the cluster client itself
 * closes only when its pool drains, which never happens while every node is dialled again
 * (clusterNodeRetryStrategy), so a master's restart shows there.
 */
export function onRestart(client: Redis | Cluster, listener: () => void): void {
  if (!(client instanceof Cluster)) return watch(client, listener);
  for (const node of client.nodes("all")) watch(node, listener);
  client.on("+node", (node: Redis) => watch(node, listener));
}

function watch(client: Redis, listener: () => void): void {
  let dropped = false;
  let runId = runIdOf(client);
  client.on("close", () => (dropped = true));
  client.on("ready", () => {
    if (!dropped) return;
    dropped = false;
    const before = runId;
    runId = runIdOf(client);
    void Promise.all([before, runId]).then(([was, is]) => {
      if (was === undefined || is === undefined || was !== is) listener();
    });
  });
}

/** The server's `run_id` (a new one at every start), or undefined when it cannot be read. */
async function runIdOf(client: Redis): Promise<string | undefined> {
  try {
    return /^run_id:(\w+)/m.exec(await client.info("server"))?.[1];
  } catch {
    return undefined;
  }
}
