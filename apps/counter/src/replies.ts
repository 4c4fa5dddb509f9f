/**
 * Replies of a counter node and what a commit made durable: shared by the router, the presence
 * intake, the durable writer and the commit steps.
 */
import type { Entry } from "@livecount/crdt";
import { ProtocolError, type ErrorCode, type ErrorReply, type NodeReply } from "@livecount/protocol";
import type { Fence } from "@livecount/store";
import type { PageActor } from "./page_actor.js";

/** One data center's entries of a page that are durable and may be published (one update message). */
export interface DurableUpdate {
  readonly page: string;
  readonly partition: number;
  readonly dc: string;
  /** By counter name (a Map: time bucket names are new keys on nearly every page; encodePageUpdate). */
  readonly counters: ReadonlyMap<string, Entry>;
  /** For this DC's gateways only (its updates subject), not every DC's page subject. */
  readonly local?: boolean;
}

/** What a settled commit of publisher changes holds (increments and resets alike). */
export interface AnsweredChanges {
  readonly answers: ReadonlyArray<{
    readonly pending: { resolve(reply: NodeReply): void };
    readonly reply: NodeReply;
  }>;
  readonly durable: readonly DurableUpdate[];
  /** Per partition whose fence the store found stale, the fence it refused. */
  readonly lost: ReadonlyMap<number, Fence>;
  /** Applied changes whose stored entry came back below the owner's count (countedEntry). */
  readonly repaired: number;
}

export function errorReply(code: ErrorCode, message?: string): ErrorReply {
  const e = new ProtocolError(code, message);
  return { type: "error", code: e.code, message: e.message };
}

/** Collects the entries a commit made durable, so each page and DC is published once. */
export class DurableEntries {
  readonly #updates = new Map<
    string,
    { page: string; partition: number; dc: string; counters: Map<string, Entry>; local?: boolean }
  >();

  /** `local`: for this DC's gateways only (DurableUpdate.local). */
  add(actor: PageActor, dc: string, counter: string, entry: Entry, local = false): void {
    const id = `${actor.page}\u0000${dc}\u0000${local ? "local" : "all"}`;
    let update = this.#updates.get(id);
    if (update === undefined)
      this.#updates.set(
        id,
        (update = {
          page: actor.page,
          partition: actor.partition,
          dc,
          counters: new Map(),
          ...(local ? { local } : {}),
        }),
      );
    update.counters.set(counter, entry);
  }

  updates(): DurableUpdate[] {
    return [...this.#updates.values()];
  }
}

/**
 * The first answer stored with an idempotency key: a JSON object whose `fields` are safe integers.
 * Undefined when what the store holds is not one (the op then answers "internal", nothing breaks).
 */
export function parsePayload<K extends string>(
  payload: string,
  fields: readonly K[],
): Record<K, number> | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(payload);
  } catch {
    return undefined;
  }
  if (typeof parsed !== "object" || parsed === null) return undefined;
  const record = parsed as Record<string, unknown>;
  return fields.every((f) => Number.isSafeInteger(record[f])) ? (record as Record<K, number>) : undefined;
}
