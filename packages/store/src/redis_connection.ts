/**
 * How the Redis store's calls reach Redis: one ioredis client with the store's scripts defined, each
 * call one pipeline whose failed command rejects it (as a StoreError). Time, keys and what the
 * scripts mean stay with the store (redis_store.ts).
 */
import { Redis, type ChainableCommander } from "ioredis";
import { SCRIPTS, type ScriptName } from "./redis_scripts.js";
import { StoreError } from "./store.js";

export interface RedisConnectionOptions {
  /** `redis://[user:password@]host:port[/db]`. */
  readonly url: string;
  /** A call rejects when Redis has not answered within this many ms. Default 5000. */
  readonly commandTimeoutMs?: number;
  /** Connection errors while reconnecting (calls themselves reject); for logging. */
  readonly onError?: (err: Error) => void;
}

const DEFAULT_COMMAND_TIMEOUT_MS = 5_000;
const CONNECT_TIMEOUT_MS = 5_000;
/**
 * Reconnect attempts a call caught in flight by a disconnect waits through before it rejects. New
 * calls while disconnected reject at once (no offline queue): the caller decides (retry, shed,
 * report not ready) instead of stalling its mailbox behind a dead connection.
 */
const MAX_RETRIES_PER_REQUEST = 3;
const RECONNECT_BASE_MS = 50;
/** Backoff cap, so the store is usable again within about a second of Redis coming back. */
const RECONNECT_MAX_MS = 1_000;

/** A script argument: numbers travel as decimal strings. */
export type Arg = string | number;

/** Queues a script defined with `defineCommand` (as EVALSHA, or EVAL on a fresh connection). */
export function queueScript(
  pipeline: ChainableCommander,
  name: ScriptName,
  keys: readonly string[],
  args: readonly Arg[],
) {
  // defineCommand adds the script as a method at runtime, which the typings cannot know.
  const commands = pipeline as unknown as Record<ScriptName, (...a: Arg[]) => ChainableCommander>;
  commands[name](keys.length, ...keys, ...args);
}

/** One client of a Redis store, with its scripts defined. */
export class RedisConnection {
  readonly client: Redis;
  #closed = false;

  private constructor(client: Redis) {
    this.client = client;
  }

  /** Connects and waits until Redis is ready (AOF loaded); rejects with a StoreError if it cannot. */
  static async open(options: RedisConnectionOptions): Promise<RedisConnection> {
    const client = new Redis(options.url, {
      lazyConnect: true,
      connectTimeout: CONNECT_TIMEOUT_MS,
      commandTimeout: options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS,
      maxRetriesPerRequest: MAX_RETRIES_PER_REQUEST,
      enableOfflineQueue: false,
      retryStrategy: (times) => Math.min(RECONNECT_BASE_MS * 2 ** Math.min(times, 16), RECONNECT_MAX_MS),
    });
    // With a listener ioredis reports connection errors here instead of treating them as unhandled.
    client.on("error", (err: Error) => options.onError?.(err));
    for (const [name, lua] of Object.entries(SCRIPTS)) client.defineCommand(name, { lua });
    try {
      await client.connect();
    } catch (cause) {
      client.disconnect();
      throw new StoreError("cannot connect to redis", { cause });
    }
    return new RedisConnection(client);
  }

  /** Sends the scripts queued by `queue` as one pipeline; any failed script rejects the call. */
  async run(operation: string, queue: (pipeline: ChainableCommander) => void): Promise<unknown[]> {
    this.assertOpen();
    const pipeline = this.client.pipeline();
    queue(pipeline);
    const results = await pipeline.exec().catch((cause: unknown) => {
      throw new StoreError(`redis ${operation} failed`, { cause });
    });
    if (results === null) throw new StoreError(`redis ${operation} failed: no reply`);
    return results.map(([err, reply]) => {
      if (err !== null) throw new StoreError(`redis ${operation} failed`, { cause: err });
      return reply;
    });
  }

  assertOpen(): void {
    if (this.#closed) throw new StoreError("store is closed");
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.client.quit().catch(() => this.client.disconnect());
  }
}
