/**
 * The Redis store's purge of settled deletes (Store.purgeTombstones): the candidates come from the
 * partition's tombstone index, then one script call purges those that may go, atomically, declaring
 * every key it touches.
 */
import { bucketOf } from "./digest.js";
import { queueScript, type Arg, type RedisConnection } from "./redis_connection.js";
import type { RedisKeys } from "./redis_keys.js";
import { fenceArg } from "./redis_lua.js";
import { StaleFenceError, type Fence, type PurgeResult } from "./store.js";

export async function purgeTombstones(
  conn: RedisConnection,
  keys: RedisKeys,
  fence: Fence,
  now: number,
  { deletedBefore, offset, limit }: { deletedBefore: number; offset: number; limit: number },
): Promise<PurgeResult> {
  const { partition } = fence;
  const [candidates] = await conn.run("tombstonePages", (pipe) =>
    pipe(partition).zrangebyscore(keys.tombs(partition), "-inf", deletedBefore, "LIMIT", offset, limit + 1),
  );
  const more = (candidates as string[]).length > limit;
  const pages = (candidates as string[]).slice(0, limit);
  const scriptKeys = [
    keys.lease(partition),
    keys.pages(partition),
    keys.digest(partition),
    keys.bucketIndex(partition),
    keys.empty(partition),
    keys.tombs(partition),
    ...pages.map((page) => keys.page(page, partition)),
  ];
  const args: Arg[] = [fenceArg(fence), now, deletedBefore];
  for (const page of pages) args.push(page, bucketOf(page));
  const [reply] = await conn.run("purgeTombstones", (pipe) =>
    queueScript(pipe(partition), "lcPurge", scriptKeys, args),
  );
  if (reply === -1) throw new StaleFenceError(fence);
  const [floor, kept, stay, ...rest] = reply as Array<string | number | string[]>;
  const purged: Array<{ page: string; counters: string[] }> = [];
  for (let i = 0; i < rest.length; i += 2) {
    purged.push({ page: pages[(rest[i] as number) - 1]!, counters: rest[i + 1] as string[] });
  }
  return {
    purged,
    kept: Number(kept),
    floor: Number(floor),
    next: more ? offset + Number(stay) : undefined,
  };
}
