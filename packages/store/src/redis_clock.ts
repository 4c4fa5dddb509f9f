import { performance } from "node:perf_hooks";
import { BUS_NOTES_PARTITION } from "./redis_keys.js";
import type { RedisConnection } from "./redis_connection.js";

/** How often the Redis clock is read again: it and this host's monotonic clock drift apart slowly. */
const RESYNC_MS = 10_000;

/**
 * The Redis server's clock, carried between readings by this process's monotonic clock. Leases,
 * fences and the expiry of keys are stamped and checked by it, so every counter node of a DC keeps
 * time by one clock whatever its own says: by its own clock, a node minutes ahead wrote leases that
 * the others waited minutes for after it died, and took its peers' live leases when it restarted;
 * one whose clock stepped back left its store believing stale fences.
 *
 * Read with TIME (on the server of the bus notes, whose scripts stamp with TIME too), from the
 * middle of the round trip: off by at most half of it.
 */
export class RedisClock {
  /** Redis epoch-ms minus this process's monotonic ms. */
  #offset: number;
  readonly #timer: ReturnType<typeof setInterval>;

  private constructor(conn: RedisConnection, offset: number) {
    this.#offset = offset;
    this.#timer = setInterval(() => {
      // A failed reading keeps the last offset: the monotonic clock carries it meanwhile.
      void RedisClock.#read(conn).then(
        (offset) => (this.#offset = offset),
        () => {},
      );
    }, RESYNC_MS);
    this.#timer.unref();
  }

  static async start(conn: RedisConnection): Promise<RedisClock> {
    return new RedisClock(conn, await RedisClock.#read(conn));
  }

  static async #read(conn: RedisConnection): Promise<number> {
    const sent = performance.now();
    const [reply] = await conn.run("time", (pipe) => void pipe(BUS_NOTES_PARTITION).time());
    const answered = performance.now();
    const [seconds, micros] = reply as [string, string];
    return Number(seconds) * 1000 + Number(micros) / 1000 - (sent + answered) / 2;
  }

  /** The Redis server's time now, in epoch-ms. */
  now(): number {
    return Math.round(performance.now() + this.#offset);
  }

  close(): void {
    clearInterval(this.#timer);
  }
}
