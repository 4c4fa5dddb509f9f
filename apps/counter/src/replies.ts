/**
 * Replies of a counter node and what a commit made durable: shared by the router, the presence
 * intake, the durable writer and the commit steps.
 */
import type { Entry } from "@livecount/crdt";
import { ProtocolError, type ErrorCode, type ErrorReply } from "@livecount/protocol";
import type { PageActor } from "./page_actor.js";

/** Entries of pages that are durable and may be published: page -> its partition and counters. */
export type DurablePages = ReadonlyMap<
  string,
  { readonly partition: number; readonly counters: Readonly<Record<string, Entry>> }
>;

export function errorReply(code: ErrorCode, message?: string): ErrorReply {
  const e = new ProtocolError(code, message);
  return { type: "error", code: e.code, message: e.message };
}

/** Collects the entries a commit made durable, by page, so each page is published once. */
export class DurableEntries {
  readonly #pages = new Map<string, { partition: number; counters: Map<string, Entry> }>();

  add(actor: PageActor, counter: string, entry: Entry): void {
    let page = this.#pages.get(actor.page);
    if (page === undefined)
      this.#pages.set(actor.page, (page = { partition: actor.partition, counters: new Map() }));
    page.counters.set(counter, entry);
  }

  pages(): DurablePages {
    const pages = new Map<string, { partition: number; counters: Record<string, Entry> }>();
    // fromEntries defines own properties: a counter named "__proto__" stays a counter.
    for (const [page, { partition, counters }] of this.#pages)
      pages.set(page, { partition, counters: Object.fromEntries(counters) });
    return pages;
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
