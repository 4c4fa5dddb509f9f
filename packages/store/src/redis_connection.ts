/**
 * How the Redis store's calls reach Redis: one ioredis client (`Redis`, or `Cluster` on Redis
 * Cluster) with the store's scripts defined, each call one pipeline per server it touches (each
 * script within one slot), sent at once, whose failed command rejects it (as a StoreError). Time,
 * keys and what the scripts mean stay with the store (redis_store.ts).
 */
import calculateSlot from "cluster-key-slot";
import { Cluster, type ChainableCommander, type Redis } from "ioredis";
import { Packr, Unpackr } from "msgpackr";
import { performance } from "node:perf_hooks";
import {
  DEFAULT_COMMAND_TIMEOUT_MS,
  SLOTS_REFRESH_MS,
  createClient,
  droppedConnection,
  type RedisConnectionOptions,
} from "./redis_client.js";
import { partitionTag } from "./redis_keys.js";
import { onRestart } from "./redis_restarts.js";
import { SCRIPTS, type ScriptName } from "./redis_scripts.js";
import { StoreConnectError, StoreError } from "./store.js";

export type { RedisConnectionOptions } from "./redis_client.js";

/**
 * A replica on the same LAN confirms within a millisecond or two; a second leaves room for a slow
 * one while keeping a publisher's increment (3 s request timeout, answered "unavailable" at half)
 * well inside its budget.
 */
const DEFAULT_WAIT_TIMEOUT_MS = 1_000;

/** How long a cluster master whose pipeline failed whole is skipped: as often as the slot map is re-read. */
const DOWN_MS = SLOTS_REFRESH_MS;

/** A script argument: numbers travel as decimal strings. */
export type Arg = string | number | Buffer;

/**
 * Plain MessagePack (no record extension) for Lua's cmsgpack; strings as str, so binary-safe field
 * names (they hold a NUL) arrive as they were sent.
 */
export const packer = new Packr({ useRecords: false, variableMapSize: true });
/**
 * What Lua's cmsgpack packs: plain arrays, strings and numbers. cmsgpack packs a value of 2^32 or
 * more as a 64-bit integer, which must come back a number (counters stay below 2^53), not a BigInt.
 * Scripts with much to answer pack it (queued with `buffer`): one buffer to unpack costs the client
 * far less than a nested reply, which ioredis decodes a string at a time.
 */
export const unpackr = new Unpackr({ useRecords: false, int64AsType: "number" });

/**
 * What a call queues its commands on: the pipeline for the server of a partition's slot. On one
 * Redis every partition shares one pipeline; on a cluster each master gets one (ioredis sends a
 * pipeline to one server), all sent at once: one round trip of time either way. Each call of `pipe`
 * must queue exactly one command.
 */
export type Pipe = (partition: number) => ChainableCommander;

/**
 * Queues a script defined with `defineCommand` (as EVALSHA, or EVAL on a fresh connection).
 * `buffer`: its reply's strings come back as Buffers, undecoded (a script answering MessagePack).
 */
export function queueScript(
  pipeline: ChainableCommander,
  name: ScriptName,
  keys: readonly string[],
  args: readonly Arg[],
  { buffer = false }: { buffer?: boolean } = {},
) {
  // defineCommand adds the script as a method at runtime (and its `<name>Buffer` twin), which the
  // typings cannot know.
  const commands = pipeline as unknown as Record<string, (...a: Arg[]) => ChainableCommander>;
  commands[buffer ? `${name}Buffer` : name]!(keys.length, ...keys, ...args);
}

export interface RunOptions {
  /** The call's writes must survive a failover: see `run`. */
  readonly durable?: boolean;
}

/** One client of a Redis store, with its scripts defined. */
export class RedisConnection {
  readonly client: Redis | Cluster;
  /** On a cluster: each partition's commands go in a pipeline of their own. */
  readonly clustered: boolean;
  readonly #waitReplicas: number;
  readonly #waitTimeoutMs: number;
  /**
   * Servers whose last WAIT came back short, until when a durable call to them fails at once
   * instead of holding their connection another WAIT timeout (see `run`). On the monotonic clock,
   * as `#down`: a wall clock stepping back must not stretch them.
   */
  readonly #unconfirmed = new Map<string, number>();
  /** On a cluster, masters whose last pipeline failed whole, until when calls skip them. */
  readonly #down = new Map<string, number>();
  /** Per server, the turn of the last durable call: its WAIT goes out after the ones before it. */
  readonly #waiting = new Map<string, Promise<void>>();
  /** Each partition's slot (on a cluster), computed once. */
  readonly #slots = new Map<number, number>();
  #closed = false;

  private constructor(client: Redis | Cluster, options: RedisConnectionOptions) {
    this.client = client;
    this.clustered = client instanceof Cluster;
    this.#waitReplicas = options.waitReplicas ?? 0;
    this.#waitTimeoutMs = options.waitTimeoutMs ?? DEFAULT_WAIT_TIMEOUT_MS;
  }

  /** Connects and waits until Redis is ready (AOF loaded, every slot served); rejects with a StoreError if it cannot. */
  static async open(options: RedisConnectionOptions): Promise<RedisConnection> {
    const { waitReplicas = 0, waitTimeoutMs = DEFAULT_WAIT_TIMEOUT_MS } = options;
    if (!Number.isInteger(waitReplicas) || waitReplicas < 0)
      throw new StoreError("waitReplicas must be an integer >= 0");
    if (!Number.isInteger(waitTimeoutMs) || waitTimeoutMs < 1)
      throw new StoreError("waitTimeoutMs must be an integer >= 1");
    // A WAIT the client gave up on still holds the connection in Redis: it must end first.
    if (waitReplicas > 0 && waitTimeoutMs >= (options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS))
      throw new StoreError("waitTimeoutMs must be below the command timeout");
    const client = createClient(options);
    // With a listener ioredis reports connection errors here instead of treating them as unhandled.
    client.on("error", (err: Error) => options.onError?.(err));
    for (const [name, lua] of Object.entries(SCRIPTS)) client.defineCommand(name, { lua });
    // Why the connection failed comes as an error event; connect() itself rejects with "Connection is
    // closed". The event is the cause worth naming, and tells a refused password from a server not up.
    let failure: unknown;
    const noteFailure = (err: Error): void => {
      failure = err;
    };
    client.on("error", noteFailure);
    try {
      await client.connect();
    } catch (cause) {
      client.disconnect();
      const why = failure ?? cause;
      throw new StoreConnectError("cannot connect to redis", { cause: why, permanent: isRefusal(why) });
    } finally {
      client.off("error", noteFailure);
    }
    return new RedisConnection(client, options);
  }

  /**
   * Sends the commands `queue` puts on the pipes (one pipeline per server, all at once) and returns
   * their replies in the order they were queued; any failed command rejects the call. `durable`: the
   * call's writes must survive a failover, so each pipeline ends with a WAIT for the configured
   * replicas, and the call rejects when fewer confirm (what it wrote may still be there: every write
   * is a max-merge or keyed by an idempotency key, so the caller's retry is safe). One WAIT per
   * server and call, not per slot: a WAIT holds its connection until it returns, so WAITs that
   * cannot be met (a master without its replica) must not queue up behind each other. For the same
   * reason, after a server's WAIT came back short, durable calls to it fail at once, sending nothing,
   * until a WAIT timeout has passed; then one call tries again.
   */
  async run(operation: string, queue: (pipe: Pipe) => void, options: RunOptions = {}): Promise<unknown[]> {
    const replies = await this.runEach(operation, queue, options);
    const failed = replies.find((r): r is StoreError => r instanceof StoreError);
    if (failed !== undefined) throw failed;
    return replies;
  }

  /**
   * `run`, except that a server's failure (an error, a short WAIT) fails only the commands sent to
   * it: their replies are that StoreError, the others' replies stand. Rejects when every server failed.
   */
  async runEach(
    operation: string,
    queue: (pipe: Pipe) => void,
    { durable = false }: RunOptions = {},
  ): Promise<unknown[]> {
    this.assertOpen();
    const waits = durable && this.#waitReplicas > 0;
    if (!this.clustered && !waits) {
      // One Redis, nothing to wait for: one pipeline, no grouping.
      const pipeline = this.client.pipeline();
      queue(() => pipeline);
      const sent = await this.#exec(operation, pipeline);
      if (sent instanceof StoreError) throw sent;
      if (sent.length > 0 && sent.every((r) => r instanceof StoreError)) throw sent[0] as StoreError;
      return sent;
    }
    const pipelines = new Map<string, ChainableCommander>();
    const order: string[] = [];
    queue((partition) => {
      const group = this.#serverOf(partition);
      let pipeline = pipelines.get(group);
      if (pipeline === undefined) {
        pipeline = this.client.pipeline();
        pipelines.set(group, pipeline);
      }
      order.push(group);
      return pipeline;
    });
    const byGroup = new Map(
      await Promise.all(
        [...pipelines].map(([group, pipeline]) => this.#send(operation, group, pipeline, waits)),
      ),
    );
    const next = new Map<string, number>();
    const replies = order.map((group) => {
      const sent = byGroup.get(group)!;
      if (sent instanceof StoreError) return sent;
      const i = next.get(group) ?? 0;
      next.set(group, i + 1);
      return sent[i];
    });
    const failed = replies.filter((r): r is StoreError => r instanceof StoreError);
    if (failed.length > 0 && failed.length === replies.length) throw failed[0]!;
    return replies;
  }

  /**
   * One server's pipeline: its replies (a failed command's as a StoreError), or the StoreError that
   * failed it whole. With `waits`, ends with the WAIT, one at a time per server: a WAIT holds its
   * connection, so WAITs queued behind each other would hold every command to that server for
   * their sum. A call that finds the server's last WAIT (or durable pipeline) failed within a WAIT
   * timeout fails at once, sending nothing; after that timeout, one tries again.
   */
  async #send(
    operation: string,
    group: string,
    pipeline: ChainableCommander,
    waits: boolean,
  ): Promise<[string, unknown[] | StoreError]> {
    if (!waits) return [group, await this.#execOn(operation, group, pipeline)];
    const before = this.#waiting.get(group) ?? Promise.resolve();
    let done!: () => void;
    const turn = before.then(() => new Promise<void>((resolve) => (done = resolve)));
    this.#waiting.set(group, turn);
    try {
      await before;
      const until = this.#unconfirmed.get(group);
      if (until !== undefined && performance.now() < until) {
        return [group, this.#notConfirmed(operation, group, "its last WAIT came back short")];
      }
      pipeline.wait(this.#waitReplicas, this.#waitTimeoutMs);
      const sent = await this.#execOn(operation, group, pipeline);
      const confirmed = sent instanceof StoreError ? sent : sent.pop();
      if (typeof confirmed === "number" && confirmed >= this.#waitReplicas) {
        this.#unconfirmed.delete(group);
        return [group, sent];
      }
      // A pipeline that had no connection tells nothing of the replicas: the next call goes to the
      // connection that replaces it, and its WAIT says.
      const cutOff = sent instanceof StoreError ? sent : confirmed;
      if (!(cutOff instanceof StoreError && droppedConnection(cutOff)))
        this.#unconfirmed.set(group, performance.now() + this.#waitTimeoutMs);
      if (sent instanceof StoreError) return [group, sent];
      const why =
        confirmed instanceof StoreError
          ? `its WAIT failed (${String(confirmed.cause)})`
          : `${String(confirmed)} of ${this.#waitReplicas} replicas within ${this.#waitTimeoutMs} ms`;
      return [group, this.#notConfirmed(operation, group, why)];
    } finally {
      done();
      if (this.#waiting.get(group) === turn) this.#waiting.delete(group);
    }
  }

  /**
   * `#exec` on a cluster's master, skipped (failed at once) for a second after its last pipeline
   * failed whole: a master that died stays in the slot map until the failover, and every call sent
   * to it waits out the client's retries (up to 1.6 s), which would hold each call's answers from
   * the healthy masters too. After that second, one call tries it again.
   */
  async #execOn(
    operation: string,
    group: string,
    pipeline: ChainableCommander,
  ): Promise<unknown[] | StoreError> {
    if (this.clustered) {
      const until = this.#down.get(group);
      if (until !== undefined && performance.now() < until) {
        return new StoreError(
          `redis ${operation} failed: ${group.split(";")[0]} did not answer within the last second`,
        );
      }
      if (until !== undefined) this.#down.set(group, performance.now() + DOWN_MS);
    }
    const sent = await this.#exec(operation, pipeline);
    if (this.clustered) {
      if (sent instanceof StoreError) this.#down.set(group, performance.now() + DOWN_MS);
      else this.#down.delete(group);
    }
    return sent;
  }

  /** A pipeline's replies, each failed command's as a StoreError; a StoreError when it failed whole. */
  async #exec(operation: string, pipeline: ChainableCommander): Promise<unknown[] | StoreError> {
    const replies = await pipeline.exec().catch((cause: unknown) => cause);
    if (replies === null) return new StoreError(`redis ${operation} failed: no reply`);
    if (!Array.isArray(replies)) return new StoreError(`redis ${operation} failed`, { cause: replies });
    return (replies as Array<[Error | null, unknown]>).map(([err, reply]) =>
      err !== null ? new StoreError(`redis ${operation} failed`, { cause: err }) : reply,
    );
  }

  #notConfirmed(operation: string, server: string, why: string): StoreError {
    const master = server.split(";")[0];
    return new StoreError(`redis ${operation} not confirmed${master === "" ? "" : ` by ${master}`}: ${why}`);
  }

  /**
   * Which pipeline a partition's commands go in: the master serving its slot on a cluster (as the
   * client last learned the slots; a stale map fails the call with MOVED and the next call uses the
   * refreshed one), the one pipeline on one Redis.
   */
  #serverOf(partition: number): string {
    if (!this.clustered) return "";
    let slot = this.#slots.get(partition);
    if (slot === undefined) this.#slots.set(partition, (slot = calculateSlot(partitionTag(partition))));
    // ioredis accepts a pipeline whose slots share master and replicas: group by both.
    return (this.client as Cluster).slots[slot]?.join(";") ?? `slot ${slot}`;
  }

  assertOpen(): void {
    if (this.#closed) throw new StoreError("store is closed");
  }

  /** `listener` runs when a server restarted under a connection that came back (redis_restarts.ts). */
  onReconnect(listener: () => void): void {
    onRestart(this.client, listener);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.client.quit().catch(() => this.client.disconnect());
  }
}

/** Redis refused the credentials (ACL or requirepass): a later try would fail the same way. */
function isRefusal(err: unknown): boolean {
  return err instanceof Error && err.name === "ReplyError" && /^(WRONGPASS|NOAUTH)\b/.test(err.message);
}
