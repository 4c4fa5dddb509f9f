/**
 * The Redis store's removal of expired window buckets (Store.removeExpiredBuckets): which entries are
 * due comes from the partition's expiring index; one script call then removes those of each page
 * atomically, declaring every key it touches.
 */
import { bucketOf } from "./digest.js";
import { queueScript, type Arg, type RedisConnection } from "./redis_connection.js";
import type { RedisKeys } from "./redis_keys.js";
import { fenceArg } from "./redis_lua.js";
import { StaleFenceError, type Fence } from "./store.js";

export async function removeExpiredBuckets(
  conn: RedisConnection,
  keys: RedisKeys,
  fence: Fence,
  now: number,
  limit: number,
): Promise<number> {
  const partition = fence.partition;
  const [due] = await conn.run("expiredBuckets", (pipe) =>
    pipe(partition).zrangebyscore(keys.expiring(partition), "-inf", now, "LIMIT", 0, limit),
  );
  const fields = new Map<string, string[]>();
  for (const member of due as string[]) {
    const cut = member.indexOf("\u0000");
    const page = member.slice(0, cut);
    const list = fields.get(page) ?? [];
    list.push(member.slice(cut + 1));
    fields.set(page, list);
  }
  if (fields.size === 0) return 0;
  const scriptKeys = [
    keys.lease(partition),
    keys.pages(partition),
    keys.digest(partition),
    keys.bucketIndex(partition),
    keys.empty(partition),
    keys.expiring(partition),
  ];
  const args: Arg[] = [fenceArg(fence), now];
  for (const [page, list] of fields) {
    scriptKeys.push(keys.page(page, partition));
    args.push(page, bucketOf(page), list.length, ...list);
  }
  const [removed] = await conn.run("removeExpiredBuckets", (pipe) =>
    queueScript(pipe(partition), "lcDropBuckets", scriptKeys, args),
  );
  if (removed === -1) throw new StaleFenceError(fence);
  return Number(removed);
}
