/**
 * The publisher changes this owner answered lately, by page and idempotency key, with their
 * answers. A retry within `memoryMs` is answered from here as the store would answer it: the same
 * answer, replayed, or a conflict when the key came with another change.
 *
 * Why memory as well as the store: Redis writes its append file to disk once a second
 * (`appendfsync everysec`, infra/redis/redis.conf), so a crash of Redis's machine loses the last
 * second of keys along with the changes. A retry of one of those (its answer was lost on the way)
 * would count again, and the owner counts on from its own count (`countedEntry`), which already
 * holds it. So when the store comes back restarted, or a change comes back from it below the
 * owner's count (it lost writes), the keys remembered here are written back to it
 * (`Store.restoreKeys`), with the answers the owner gave: a retry up to the keys' TTL is then
 * answered by the store. Kept for longer than Redis may take to reach the disk
 * (CounterConfig.idempotencyMemoryMs), counted while the store answers, for this owner's lifetime
 * only: a new owner reads the keys from the store.
 *
 * "While the store answers": of the time between two answers at most a sixth of the memory counts
 * (0.5 s of the default 3 s), so the keys of the last 2.5 s before any silence stay through it, and
 * Redis may take 2 s to reach the disk. After an outage, changes sent on the new connection may be
 * answered before it is found to be a restart (the server's run id is read after it is ready);
 * counting the outage then would forget every key answered just before it, the ones the restart
 * lost. On a cluster every master's answers count, so a master down longer than the memory while
 * the others answer loses its keys' memory (docs/architecture.md).
 */
import type { IncrementRequest, NodeReply } from "@livecount/protocol";
import type { Clock, Logger } from "@livecount/runtime";
import type { Fence, KeyRestore, Store } from "@livecount/store";
import { errorReply } from "./replies.js";

/** A queued change, as the durable writer holds increments and resets. */
interface Pending {
  readonly actor: { readonly partition: number };
  readonly request: { readonly page: string; readonly key: string };
  readonly resolve: (reply: NodeReply) => void;
}

/** What a change did with its key: `change` compares a retry (as the store does), `record` restores it. */
export interface KeyUse {
  readonly change: string;
  readonly record: KeyRestore;
}

/**
 * One answered key. What it compares and writes back (`use`) is worked out only when a retry or a
 * write-back needs it: a hot page answers tens of thousands a second, and every object kept here
 * for seconds is one the garbage collector carries into its old generation.
 */
interface Recent {
  /** When it was answered (monotonic): its TTL counts from here. */
  readonly at: number;
  /** When it was answered in the time the store answered (`RecentKeys.#answering`): its memory counts from here. */
  readonly answering: number;
  /** In the order answered: the next write-back starts after the last one's. */
  readonly seq: number;
  readonly partition: number;
  readonly request: { readonly page: string; readonly key: string };
  readonly reply: NodeReply;
  readonly use: (request: never, reply: NodeReply) => KeyUse;
}

export interface RecentKeysOptions {
  readonly clock: Clock;
  readonly logger: Logger;
  readonly store: Store;
  readonly fenceOf: (partition: number) => Fence | undefined;
  /** LIVECOUNT_IDEMPOTENCY_TTL_S: how long a restored key is kept in the store. */
  readonly keyTtlMs: number;
  /** LIVECOUNT_IDEMPOTENCY_MEMORY_MS: how long an answered key is remembered here. */
  readonly memoryMs: number;
  /** LIVECOUNT_IDEMPOTENCY_MEMORY_KEYS: at most this many, the oldest forgotten first. */
  readonly maxKeys: number;
  /** Where the keys of applied changes go to the other data centers (KeyReplication). */
  readonly across?: KeysAcross;
}

export interface KeysAcross {
  /** Whether keys are sent now: the records are built only then. */
  readonly sending: boolean;
  send(byPartition: ReadonlyMap<number, readonly KeyRestore[]>): void;
}

/** Of the silence between two answers, at most `memoryMs / SILENCE_COUNTED` counts as answering. */
const SILENCE_COUNTED = 6;

export class RecentKeys {
  readonly #o: RecentKeysOptions;
  /** By `page\0key`, oldest first. */
  readonly #keys = new Map<string, Recent>();
  #seq = 0;
  /** When the store last answered a change (monotonic). */
  #answeredAt: number | undefined;
  /** How long the store has answered (ms): the time between two answers, up to `memoryMs / 6` of it. */
  #answering = 0;
  /** The last key written back to the store (its seq): the next write-back starts after it. */
  #restoredUpTo = 0;
  /**
   * Write-backs in flight: they run beside the commit chain, whose answers meanwhile must not make
   * memory forget a key the store has not got back yet (its retry would count again).
   */
  #restoring = 0;
  /**
   * Partitions whose keys a write-back could not write, until when they wait, kept (at most their
   * TTL): found without a fence (their lease lapsed while the store was away, as it does when
   * Redis's machine restarts), refused as stale, or failed. The next change answered while the
   * partition is held writes them back.
   */
  readonly #unheld = new Map<number, number>();

  constructor(options: RecentKeysOptions) {
    this.#o = options;
  }

  /**
   * Answers every change of `pending` whose key is remembered, and returns the rest, in order.
   * `change` says what a request does with its key (its counter and delta, or its reset), as
   * KeyUse.change does.
   */
  answer<P extends Pending>(pending: readonly P[], change: (request: P["request"]) => string): P[] {
    if (this.#keys.size === 0) return [...pending];
    this.#prune();
    const rest: P[] = [];
    for (const p of pending) {
      const recent = this.#keys.get(idOf(p.request));
      if (recent === undefined) rest.push(p);
      else if (useOf(recent).change !== change(p.request)) p.resolve(errorReply("idempotency_conflict"));
      else p.resolve({ ...recent.reply, duplicate: true } as NodeReply);
    }
    return rest;
  }

  /**
   * Remembers the keys of changes the store applied or replayed, with their answers; when `repaired`
   * of them came back below the owner's count, writes back every key answered since the last such
   * write (all remembered at the first), so the store answers their retries as the owner did.
   */
  async settled<P extends Pending>(
    answers: ReadonlyArray<{ readonly pending: P; readonly reply: NodeReply }>,
    repaired: number,
    use: (request: P["request"], reply: NodeReply) => KeyUse,
  ): Promise<void> {
    const at = this.#o.clock.monotonic();
    if (answers.length > 0) {
      const since = this.#answeredAt === undefined ? 0 : at - this.#answeredAt;
      this.#answering += Math.min(since, this.#o.memoryMs / SILENCE_COUNTED);
      this.#answeredAt = at;
    }
    const across = this.#o.across?.sending === true ? new Map<number, KeyRestore[]>() : undefined;
    for (const { pending, reply } of answers) {
      if (reply.type !== "incremented" && reply.type !== "counter_reset") continue;
      // Replays too: the first answer's key may never have left (its owner died before answering).
      if (across !== undefined) {
        const { partition } = pending.actor;
        const list = across.get(partition) ?? [];
        if (list.length === 0) across.set(partition, list);
        list.push(use(pending.request, reply).record);
      }
      const id = idOf(pending.request);
      this.#keys.delete(id);
      const seq = ++this.#seq;
      this.#keys.set(id, {
        at,
        answering: this.#answering,
        seq,
        partition: pending.actor.partition,
        request: pending.request,
        reply,
        use,
      });
    }
    if (across !== undefined && across.size > 0) this.#o.across?.send(across);
    this.#prune();
    if (repaired > 0) await this.#restore("the store lost writes: counting on from this node's count");
    if (this.#unheld.size > 0) await this.#restoreHeldAgain();
  }

  /**
   * The store's connection came back after it dropped: its server may have restarted from a file
   * that lacks its last second. Every key remembered goes back to it, so a retry of one counts once
   * however late it comes, before any change shows the loss.
   */
  restoreAll(): Promise<void> {
    this.#prune();
    this.#restoredUpTo = 0;
    return this.#restore("the store reconnected");
  }

  get size(): number {
    return this.#keys.size;
  }

  async #restore(why: string): Promise<void> {
    const since = this.#restoredUpTo;
    this.#restoredUpTo = this.#seq;
    await this.#writeBack(why, (recent) => recent.seq > since);
  }

  /** Writes back the keys of partitions held again that a write-back found without a fence. */
  async #restoreHeldAgain(): Promise<void> {
    const now = this.#o.clock.monotonic();
    const held = new Set<number>();
    for (const [partition, until] of this.#unheld) {
      if (now >= until) this.#unheld.delete(partition);
      else if (this.#o.fenceOf(partition) !== undefined) held.add(partition);
    }
    for (const partition of held) this.#unheld.delete(partition);
    if (held.size > 0) await this.#writeBack("partitions held again", (r) => held.has(r.partition));
  }

  async #writeBack(why: string, which: (recent: Recent) => boolean): Promise<void> {
    const byPartition = new Map<number, KeyRestore[]>();
    for (const recent of this.#keys.values()) {
      if (!which(recent)) continue;
      const list = byPartition.get(recent.partition);
      const { record } = useOf(recent);
      if (list === undefined) byPartition.set(recent.partition, [record]);
      else list.push(record);
    }
    const { store, fenceOf, keyTtlMs, logger, clock } = this.#o;
    let keys = 0;
    this.#restoring++;
    try {
      for (const [partition, records] of byPartition) {
        const fence = fenceOf(partition);
        let written = false;
        try {
          written = fence !== undefined && (await store.restoreKeys(fence, records, keyTtlMs));
        } catch (err) {
          logger.warn(
            { err, partition, keys: records.length },
            "idempotency keys not restored; trying again",
          );
        }
        // The keys wait (kept) until the partition is held and the store takes them, within their TTL.
        if (written) keys += records.length;
        else this.#unheld.set(partition, clock.monotonic() + keyTtlMs);
      }
    } finally {
      this.#restoring--;
    }
    if (keys > 0) logger.warn({ keys }, `${why}; idempotency keys answered lately written back`);
  }

  #prune(): void {
    // Time counts while the store answers: keys answered just before an outage stay through it
    // (`restoreAll` writes them back when the store reconnects; until it is done, the store's
    // answers meanwhile count no time), never past their TTL.
    const answered = this.#restoring > 0 ? -Infinity : this.#answering - this.#o.memoryMs;
    const expired = this.#o.clock.monotonic() - this.#o.keyTtlMs;
    for (const [id, recent] of this.#keys) {
      if (this.#keys.size <= this.#o.maxKeys) {
        if (recent.answering > answered && recent.at > expired) break;
        if (this.#unheld.has(recent.partition)) continue;
      }
      this.#keys.delete(id);
    }
  }
}

/** What an increment does with its key, as the store compares it: its counter and delta. */
export function incrementUse(request: IncrementRequest, reply: NodeReply): KeyUse {
  const { page, key, counter, delta } = request;
  const answer = reply.type === "incremented" ? reply : { value: 0, updatedAt: 0 };
  // The answer in the form both releases read (value, updatedAt; increment_batch.ts storedAnswer).
  const payload = `{"value":${answer.value},"updatedAt":${answer.updatedAt}}`;
  return { change: incrementChange(request), record: { page, key, counter, delta, payload } };
}

export function incrementChange(request: IncrementRequest): string {
  return `${request.counter}\u0000${request.delta}`;
}

/** What `recent`'s change did with its key: its `use` applied to the request it was kept with. */
function useOf(recent: Recent): KeyUse {
  return (recent.use as (request: Recent["request"], reply: NodeReply) => KeyUse)(
    recent.request,
    recent.reply,
  );
}

function idOf(request: { readonly page: string; readonly key: string }): string {
  return `${request.page}\u0000${request.key}`;
}
