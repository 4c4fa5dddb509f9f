/**
 * The Redis store's partition leases (Store.acquire, renew, release) and the notes counter nodes
 * leave of hearing their bus (Store.noteBusHeard, busHeard), on a connection of their own: a
 * renewal never waits behind a flush's pipeline.
 */
import { PartialWriteError, StoreError, type AcquireOptions, type BusNote, type Lease } from "./store.js";
import { BUS_NOTES_PARTITION, type RedisKeys } from "./redis_keys.js";
import { queueScript, type RedisConnection } from "./redis_connection.js";
import { assertTtl } from "./validate.js";

/** Notes older than this are dropped when read (Store.busHeard). */
const NOTES_KEPT_MS = 3_600_000;

export class RedisLeases {
  constructor(
    private readonly conn: RedisConnection,
    private readonly keys: RedisKeys,
    /** The time leases run on; "" for the server's own (LUA_LEASE_CLOCK). */
    private readonly now: () => number | "",
  ) {}

  async acquire(
    partition: number,
    node: string,
    ttlMs: number,
    options: AcquireOptions = {},
  ): Promise<Lease | null> {
    assertTtl("lease ttl", ttlMs);
    // Durable: an epoch a failover forgot would be handed out again, to a second owner.
    const [reply] = await this.conn.run(
      "acquire",
      (pipe) =>
        queueScript(
          pipe(partition),
          "lcAcquire",
          [this.keys.lease(partition), this.keys.epoch(partition)],
          [node, this.now(), ttlMs, options.reclaimFrom ?? ""],
        ),
      { durable: true },
    );
    if (reply === null) return null;
    const [epoch, expiresAt] = reply as [number, number];
    return { partition, node, epoch: Number(epoch), expiresAt: Number(expiresAt) };
  }

  async renew(leases: readonly Lease[], ttlMs: number): Promise<Lease[]> {
    assertTtl("lease ttl", ttlMs);
    this.conn.assertOpen();
    if (leases.length === 0) return [];
    const now = this.now();
    const replies = await this.conn.runEach("renew", (pipe) => {
      for (const l of leases) {
        queueScript(
          pipe(l.partition),
          "lcRenew",
          [this.keys.lease(l.partition)],
          [l.node, l.epoch, now, ttlMs],
        );
      }
    });
    const renewed = leases.flatMap((l, i) => {
      const expiresAt = replies[i];
      return typeof expiresAt === "number" && expiresAt > 0 ? [{ ...l, expiresAt }] : [];
    });
    const failed = leases.filter((_, i) => replies[i] instanceof StoreError);
    if (failed.length > 0) {
      throw new PartialWriteError(failed, renewed, { cause: replies.find((r) => r instanceof StoreError) });
    }
    return renewed;
  }

  async release(lease: Lease): Promise<void> {
    await this.conn.run("release", (pipe) =>
      queueScript(
        pipe(lease.partition),
        "lcRelease",
        [this.keys.lease(lease.partition)],
        [lease.node, lease.epoch],
      ),
    );
  }

  async noteBusHeard(node: string, continuing: boolean): Promise<void> {
    await this.conn.run("bus note", (pipe) =>
      queueScript(
        pipe(BUS_NOTES_PARTITION),
        "lcBusNote",
        [this.keys.busHeard()],
        [node, continuing ? "1" : "0"],
      ),
    );
  }

  /** Each node's note; a value that is not two integers (another release's, say) is left out. */
  async busHeard(): Promise<{ now: number; notes: Map<string, BusNote> }> {
    const [reply] = await this.conn.run("bus notes", (pipe) =>
      queueScript(pipe(BUS_NOTES_PARTITION), "lcBusNotes", [this.keys.busHeard()], [NOTES_KEPT_MS]),
    );
    const [now, ...pairs] = reply as string[];
    const notes = new Map<string, BusNote>();
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      const m = /^(\d+):(\d+)$/.exec(pairs[i + 1]!);
      if (m !== null) notes.set(pairs[i]!, { since: Number(m[1]), at: Number(m[2]) });
    }
    return { now: Number(now), notes };
  }

  close(): Promise<void> {
    return this.conn.close();
  }
}
