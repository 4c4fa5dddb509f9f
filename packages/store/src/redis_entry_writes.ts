/**
 * The Redis store's entry writes: Store.write, mergePages and increment, after the store validated
 * them. Each queues one script per fence group, page chunk or chunk of ops, on its partition's pipe.
 * Increments wait for the configured replicas (`durable`): a publisher's acknowledgement promises
 * them. Presence writes and merges do not: what a failover loses of them comes back from the
 * gateways and from anti-entropy, and holding them for WAIT would freeze every count of a shard
 * that lost its replica.
 */
import { MsgpackWriter, VALUE_BOUND, stringBound } from "@livecount/protocol";
import { bucketOf } from "./digest.js";
import { RecordsBuilder } from "./page_merge.js";
import { queueScript, unpackr, type Arg, type RedisConnection } from "./redis_connection.js";
import type { RedisKeys } from "./redis_keys.js";
import { fenceArg } from "./redis_lua.js";
import { entryField, parseEntry, parseOutcome, splitEntryField } from "./redis_records.js";
import {
  PartialWriteError,
  StoreError,
  type Fence,
  type FencedWrites,
  type IncrementOp,
  type IncrementOutcome,
  type KeyRestore,
  type PageRecord,
} from "./store.js";

/**
 * Pages merged by one script call in mergePages: each page is merged atomically, and a script of a
 * hundred pages keeps Redis busy for about a millisecond, so other clients never wait long.
 */
const PAGES_PER_MERGE = 100;
/** Writes the scripts' MessagePack arguments (packWrites, packMerge, packList). */
const writer = new MsgpackWriter();
/** Publisher increments applied by one script call: like PAGES_PER_MERGE, keeps each call short. */
const OPS_PER_SCRIPT = 100;

/** Store.write of validated, non-empty groups. */
export async function writeGroups(
  conn: RedisConnection,
  keys: RedisKeys,
  now: number,
  groups: readonly FencedWrites[],
): Promise<Fence[]> {
  // Presence: not held for WAIT (docs/architecture.md, "Redis Cluster"); a failed shard fails
  // only its groups (runEach).
  const replies = await conn.runEach("write", (pipe) => {
    for (const { fence, writes } of groups) {
      const partition = fence.partition;
      const scriptKeys = keys.entryScriptKeys(partition);
      const packed = packWrites(writes);
      for (const page of packed.pages) scriptKeys.push(keys.page(page, partition));
      queueScript(pipe(partition), "lcWrite", scriptKeys, [fenceArg(fence), now, packed.buffer]);
    }
  });
  const failed = groups.filter((_, i) => replies[i] instanceof StoreError).map((g) => g.fence);
  const stale = groups
    .filter((_, i) => !(replies[i] instanceof StoreError) && replies[i] !== 1)
    .map((g) => g.fence);
  if (failed.length > 0) {
    throw new PartialWriteError(failed, stale, { cause: replies.find((r) => r instanceof StoreError) });
  }
  return stale;
}

/**
 * A group's writes as lcWrite takes them: grouped by page (in the order pages first appear), one
 * MessagePack array of page, bucket, entry count, then field, p, n, indexed per entry. Written by
 * hand (MsgpackWriter): a flush packs every entry it writes, and msgpackr's generic steps were most
 * of that.
 */
export function packWrites(writes: FencedWrites["writes"]): { pages: string[]; buffer: Buffer } {
  const byPage = new Map<string, Array<FencedWrites["writes"][number]>>();
  let bound = VALUE_BOUND;
  for (const w of writes) {
    const list = byPage.get(w.page);
    if (list === undefined) {
      byPage.set(w.page, [w]);
      bound += stringBound(w.page) + 2 * VALUE_BOUND;
    } else list.push(w);
    bound += stringBound(w.counter) + stringBound(w.dc) + 3 * VALUE_BOUND;
  }
  writer.begin(bound);
  writer.array(3 * byPage.size + 4 * writes.length);
  for (const [page, list] of byPage) {
    writer.string(page);
    writer.natural(bucketOf(page));
    writer.natural(list.length);
    for (const w of list) {
      writer.string(entryField(w.counter, w.dc));
      writer.natural(w.entry.p);
      writer.natural(w.entry.n);
      writer.boolean(w.indexed === true);
    }
  }
  return { pages: [...byPage.keys()], buffer: asBuffer(writer.end()) };
}

/**
 * Pages as lcMerge takes them: one MessagePack array of page, bucket, entry count, then field, p, n
 * per entry, written by hand as packWrites does (a heal merges every page it receives).
 */
export function packMerge(chunk: readonly string[], pages: ReadonlyMap<string, PageRecord>): Buffer {
  let bound = VALUE_BOUND;
  let items = 0;
  for (const page of chunk) {
    const record = pages.get(page)!;
    bound += stringBound(page) + 2 * VALUE_BOUND;
    items += 3;
    for (const counter of Object.keys(record)) {
      for (const dc of Object.keys(record[counter]!)) {
        bound += stringBound(counter) + stringBound(dc) + 2 * VALUE_BOUND;
        items += 3;
      }
    }
  }
  writer.begin(bound);
  writer.array(items);
  for (const page of chunk) {
    const record = pages.get(page)!;
    writer.string(page);
    writer.natural(bucketOf(page));
    let count = 0;
    for (const counter of Object.keys(record)) count += Object.keys(record[counter]!).length;
    writer.natural(count);
    for (const counter of Object.keys(record)) {
      const byDc = record[counter]!;
      for (const dc of Object.keys(byDc)) {
        const e = byDc[dc]!;
        writer.string(entryField(counter, dc));
        writer.natural(e.p);
        writer.natural(e.n);
      }
    }
  }
  return asBuffer(writer.end());
}

/**
 * A list of strings and safe integers as one MessagePack array, the bytes msgpackr packs: lcIncrement
 * takes its pages and ops so, and a hot page's batches spent 9% of the owner's busy time in
 * msgpackr's generic steps for them (docs/benchmarks.md).
 */
export function packList(items: ReadonlyArray<string | number>): Buffer {
  let bound = VALUE_BOUND;
  for (const item of items) bound += typeof item === "string" ? stringBound(item) : VALUE_BOUND;
  writer.begin(bound);
  writer.array(items.length);
  for (const item of items) {
    if (typeof item === "string") writer.string(item);
    else writer.integer(item);
  }
  return asBuffer(writer.end());
}

/** A view of `bytes` as a Buffer, not a copy: ioredis sends a Buffer as it is. */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Store.mergePages of validated, non-empty records. */
export async function mergePages(
  conn: RedisConnection,
  keys: RedisKeys,
  now: () => number,
  { fence, pages, indexedDc }: { fence: Fence; pages: ReadonlyMap<string, PageRecord>; indexedDc: string },
): Promise<Map<string, PageRecord> | null> {
  const partition = fence.partition;
  const ids = [...pages.keys()];
  const partitionKeys = keys.entryScriptKeys(partition);
  const replies = await conn.run("mergePages", (pipe) => {
    for (let from = 0; from < ids.length; from += PAGES_PER_MERGE) {
      const chunk = ids.slice(from, from + PAGES_PER_MERGE);
      const args: Arg[] = [fenceArg(fence), now(), entryField("", indexedDc), packMerge(chunk, pages)];
      const scriptKeys = [...partitionKeys, ...chunk.map((page) => keys.page(page, partition))];
      queueScript(pipe(partition), "lcMerge", scriptKeys, args, { buffer: true });
    }
  });
  // Every chunk checks the fence: the lease may run out between two.
  if (replies.includes(0)) return null;
  const advanced = new RecordsBuilder();
  replies.forEach((reply, chunk) => {
    // Per page that advanced: its index in the chunk, how many entries, then field and value each.
    const flat = unpackr.unpack(reply as Buffer) as Array<number | string>;
    for (let i = 0; i < flat.length;) {
      const page = ids[chunk * PAGES_PER_MERGE + (flat[i] as number) - 1]!;
      const end = i + 2 + 2 * (flat[i + 1] as number);
      for (i += 2; i < end; i += 2) {
        const { counter, dc } = splitEntryField(flat[i] as string);
        advanced.add(page, counter, dc, parseEntry(flat[i + 1] as string));
      }
    }
  });
  return advanced.build();
}

/** Records per lcRestoreKeys or lcImportKeys script: a few hundred arguments. */
const KEYS_PER_SCRIPT = 200;

/** Records of one partition, each with it. */
function placed(partition: number, records: readonly KeyRestore[]): Array<[number, KeyRestore]> {
  return records.map((r) => [partition, r]);
}

/**
 * The script arguments of records, each with its page's partition, KEYS_PER_SCRIPT a call: each
 * call's idempotency keys and ARGV.
 */
function keyCalls(
  keys: RedisKeys,
  records: ReadonlyArray<readonly [number, KeyRestore]>,
  head: readonly Arg[],
): Array<{ idemKeys: string[]; args: Arg[] }> {
  const calls: Array<{ idemKeys: string[]; args: Arg[] }> = [];
  for (let from = 0; from < records.length; from += KEYS_PER_SCRIPT) {
    const chunk = records.slice(from, from + KEYS_PER_SCRIPT);
    const args: Arg[] = [...head];
    const idemKeys: string[] = [];
    for (const [partition, r] of chunk) {
      args.push(r.counter, String(r.delta), r.payload, r.fingerprint ?? "");
      idemKeys.push(keys.idem(r.page, partition, r.key));
    }
    calls.push({ idemKeys, args });
  }
  return calls;
}

/** Store.restoreKeys of placed records. */
export async function restoreKeys(
  conn: RedisConnection,
  keys: RedisKeys,
  now: number,
  { fence, records, keyTtlMs }: { fence: Fence; records: readonly KeyRestore[]; keyTtlMs: number },
): Promise<boolean> {
  const { partition } = fence;
  const calls = keyCalls(keys, placed(partition, records), [fenceArg(fence), now + keyTtlMs, keyTtlMs]);
  const replies = await conn.run(
    "restoreKeys",
    (pipe) => {
      for (const { idemKeys, args } of calls)
        queueScript(pipe(partition), "lcRestoreKeys", [keys.lease(partition), ...idemKeys], args);
    },
    { durable: true },
  );
  return !replies.includes(0);
}

/** Store.importKeys of placed records: not durable (no WAIT), the count written. */
export async function importKeys(
  conn: RedisConnection,
  keys: RedisKeys,
  now: number,
  { byPartition, keyTtlMs }: { byPartition: ReadonlyMap<number, readonly KeyRestore[]>; keyTtlMs: number },
): Promise<number> {
  const head = [now, now + keyTtlMs, keyTtlMs];
  const replies = await conn.run("importKeys", (pipe) => {
    if (!conn.clustered) {
      // One server, and no fence to check: the partitions share script calls. Keys of other DCs
      // come spread over most partitions, and a script call per partition cost the node 30 µs of
      // CPU per key (`loadtest/bench/key_import.js`).
      const all: Array<[number, KeyRestore]> = [];
      for (const [partition, records] of byPartition) for (const r of records) all.push([partition, r]);
      for (const { idemKeys, args } of keyCalls(keys, all, head))
        queueScript(pipe(0), "lcImportKeys", idemKeys, args);
      return;
    }
    for (const [partition, records] of byPartition)
      for (const { idemKeys, args } of keyCalls(keys, placed(partition, records), head))
        queueScript(pipe(partition), "lcImportKeys", idemKeys, args);
  });
  return replies.reduce<number>((sum, r) => sum + Number(r), 0);
}

/** Store.increment of validated, non-empty ops. */
export async function increment(
  conn: RedisConnection,
  keys: RedisKeys,
  now: number,
  ops: readonly IncrementOp[],
  keyTtlMs: number,
): Promise<IncrementOutcome[]> {
  // Ops of one fence go in one script call (in order, OPS_PER_SCRIPT at most): one fence check and
  // one digest update for all of them.
  const calls: Array<{ fence: Fence; ops: number[] }> = [];
  const open = new Map<string, { fence: Fence; ops: number[] }>();
  ops.forEach((op, i) => {
    const id = `${op.fence.partition}:${fenceArg(op.fence)}`;
    let call = open.get(id);
    if (call === undefined || call.ops.length === OPS_PER_SCRIPT) {
      call = { fence: op.fence, ops: [] };
      open.set(id, call);
      calls.push(call);
    }
    call.ops.push(i);
  });
  // A failed shard fails only its own ops (runEach): the others' answers stand.
  const replies = await conn.runEach(
    "increment",
    (pipe) => {
      for (const { fence, ops: indexes } of calls) {
        const partition = fence.partition;
        const pageKeys = new Map<string, number>();
        const pages: string[] = [];
        const idemKeys: string[] = [];
        const flat: Array<string | number> = [];
        for (const i of indexes) {
          const op = ops[i]!;
          const pageKey = keys.page(op.page, partition);
          let pageIndex = pageKeys.get(pageKey);
          if (pageIndex === undefined) {
            pageKeys.set(pageKey, (pageIndex = pageKeys.size + 1));
            pages.push(op.page, String(bucketOf(op.page)));
          }
          idemKeys.push(keys.idem(op.page, partition, op.key));
          // The delta as a string: the script stores it with the key and compares it as stored.
          flat.push(
            pageIndex,
            entryField(op.counter, op.dc),
            op.counter,
            String(op.delta),
            op.payload,
            op.fingerprint ?? "",
            op.startAt ?? 0,
            op.also?.length ?? 0,
          );
          for (const c of op.also ?? []) flat.push(entryField(c.counter, op.dc), c.delta);
        }
        const scriptKeys = [...keys.entryScriptKeys(partition), ...pageKeys.keys(), ...idemKeys];
        const args: Arg[] = [fenceArg(fence), now, now + keyTtlMs, keyTtlMs, packList(pages), packList(flat)];
        queueScript(pipe(partition), "lcIncrement", scriptKeys, args, { buffer: true });
      }
    },
    { durable: true },
  );
  const outcomes = new Array<IncrementOutcome>(ops.length);
  calls.forEach((call, c) => {
    const reply =
      replies[c] instanceof Buffer ? (unpackr.unpack(replies[c] as Buffer) as unknown) : replies[c];
    const stale = Array.isArray(reply) && reply[0] === "stale";
    call.ops.forEach((i, k) => {
      outcomes[i] =
        reply instanceof StoreError
          ? { kind: "unavailable" }
          : parseOutcome(stale ? reply : (reply as unknown[])[k], ops[i]!);
    });
  });
  return outcomes;
}
