/**
 * The publisher changes this owner answered lately, by page and idempotency key, with their
 * answers. A retry within `memoryMs` is answered from here as the store would answer it: the same
 * answer, replayed, or a conflict when the key came with another change.
 *
 * Why memory as well as the store: Redis writes its append file to disk once a second
 * (`appendfsync everysec`, infra/redis/redis.conf), so a crash of Redis's machine loses the last
 * second of keys along with the changes. A retry of one of those (its answer was lost on the way)
 * would count again, and the owner counts on from its own count (`countedEntry`), which already
 * holds it. Kept for as long as a publisher's retry of a lost answer may take (CounterConfig
 * .idempotencyMemoryMs), for this owner's lifetime only: a new owner reads the keys from the store.
 */
import type { IncrementRequest, NodeReply } from "@livecount/protocol";
import type { Clock } from "@livecount/runtime";
import { errorReply } from "./replies.js";

/** A queued change, as the durable writer holds increments and resets. */
interface Pending {
  readonly request: { readonly page: string; readonly key: string };
  readonly resolve: (reply: NodeReply) => void;
}

interface Recent {
  /** When it was answered (monotonic). */
  readonly at: number;
  /** What the key was used for: a retry with anything else is a conflict. */
  readonly change: string;
  readonly reply: NodeReply;
}

export interface RecentKeysOptions {
  readonly clock: Clock;
  /** LIVECOUNT_IDEMPOTENCY_MEMORY_MS: how long an answered key is remembered here. */
  readonly memoryMs: number;
  /** LIVECOUNT_IDEMPOTENCY_MEMORY_KEYS: at most this many, the oldest forgotten first. */
  readonly maxKeys: number;
}

export class RecentKeys {
  readonly #o: RecentKeysOptions;
  /** By `page\0key`, oldest first. */
  readonly #keys = new Map<string, Recent>();

  constructor(options: RecentKeysOptions) {
    this.#o = options;
  }

  /**
   * Answers every change of `pending` whose key is remembered, and returns the rest, in order.
   * `change` names what a request does with its key (its counter and delta, or its reset).
   */
  answer<P extends Pending>(pending: readonly P[], change: (request: P["request"]) => string): P[] {
    if (this.#keys.size === 0) return [...pending];
    this.#prune();
    const rest: P[] = [];
    for (const p of pending) {
      const recent = this.#keys.get(idOf(p.request));
      if (recent === undefined) rest.push(p);
      else if (recent.change !== change(p.request)) p.resolve(errorReply("idempotency_conflict"));
      else p.resolve({ ...recent.reply, duplicate: true } as NodeReply);
    }
    return rest;
  }

  /** Remembers the keys of changes the store applied or replayed, with their answers. */
  remember<P extends Pending>(
    answers: ReadonlyArray<{ readonly pending: P; readonly reply: NodeReply }>,
    change: (request: P["request"]) => string,
  ): void {
    const at = this.#o.clock.monotonic();
    for (const { pending, reply } of answers) {
      if (reply.type !== "incremented" && reply.type !== "counter_reset") continue;
      const id = idOf(pending.request);
      this.#keys.delete(id);
      this.#keys.set(id, { at, change: change(pending.request), reply });
    }
    this.#prune();
  }

  get size(): number {
    return this.#keys.size;
  }

  #prune(): void {
    const oldest = this.#o.clock.monotonic() - this.#o.memoryMs;
    for (const [id, recent] of this.#keys) {
      if (recent.at > oldest && this.#keys.size <= this.#o.maxKeys) break;
      this.#keys.delete(id);
    }
  }
}

/** What an increment does with its key, as the store compares it: its counter and delta. */
export function incrementChange(request: IncrementRequest): string {
  return `${request.counter}\u0000${request.delta}`;
}

function idOf(request: { readonly page: string; readonly key: string }): string {
  return `${request.page}\u0000${request.key}`;
}
