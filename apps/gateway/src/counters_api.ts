/**
 * The publisher routes of protocol v1 beyond `GET`/`PUT /v1/pages/{page}/counter`: batches of
 * increments, reads of many pages (summed or raw) and by prefix, resets and deletes. Validation
 * happens here, at the edge; counter nodes do the rest (publisher_ops.ts in apps/counter).
 */
import { randomUUID } from "node:crypto";
import {
  ProtocolError,
  isCounterName,
  isIdempotencyKey,
  isPageId,
  isPagePrefix,
  type ErrorCode,
} from "@livecount/protocol";
import { parseJson, readBody, type Reply, type RequestInfo } from "./http_io.js";
import type { IncrementBatcher } from "./increment_batcher.js";
import type { OwnerClient } from "./owner_client.js";
import { rawBody, totalsBody, type Liveness } from "./page_reading.js";
import type { ReadAccess } from "./read_access.js";

/**
 * Largest change one request (or one batch item) may make to a counter: far more than any count of
 * clicks, and a billion at a time still takes nine million changes to bring an entry near 2^53 - 1,
 * the most a counter holds exactly (past it a change is refused).
 */
export const MAX_CHANGE = 1_000_000_000;
/** Most items in one `POST /v1/counters/increment`; more is 413 payload_too_large. */
export const MAX_BATCH_ITEMS = 1000;
/** Largest batch body: MAX_BATCH_ITEMS items of the longest ids fit. */
export const MAX_BATCH_BODY_BYTES = 1024 * 1024;
/**
 * Most pages one `GET /v1/counters` may read (`page=` values, or `limit` with a prefix): a page of a
 * dashboard's list. Each page read is a read at its owner, so one request's work stays bounded.
 */
export const MAX_READ_PAGES = 100;
/** Pages per answer of a prefix listing when `limit` is absent. */
export const DEFAULT_LIST_LIMIT = 100;

const NO_STORE = { "cache-control": "no-store" } as const;
const REPLAYED = { ...NO_STORE, "idempotent-replayed": "true" } as const;
const CURSOR = /^[A-Za-z0-9_-]{1,200}$/;

export interface CountersApiOptions {
  readonly owners: OwnerClient;
  readonly increments: IncrementBatcher;
  readonly partitions: number;
  readonly liveness: Liveness;
}

/** One item of `POST /v1/counters/increment`. */
export interface BatchItem {
  readonly page: string;
  readonly counter: string;
  /** Non-zero, within ±MAX_CHANGE. */
  readonly change: number;
  /** Idempotency key, scoped to the page. */
  readonly id: string;
}

type ItemResult =
  | {
      readonly page: string;
      readonly counter: string;
      readonly id: string;
      readonly value: number;
      readonly updated_at: number;
      readonly duplicate: boolean;
    }
  | {
      readonly page: string;
      readonly counter: string;
      readonly id: string;
      readonly error: { readonly code: ErrorCode; readonly message: string };
    };

function isChange(v: unknown): v is number {
  return Number.isSafeInteger(v) && v !== 0 && Math.abs(v as number) <= MAX_CHANGE;
}

/**
 * Validates a whole batch before anything is sent: any bad item rejects the request (400 with the
 * item's index in the message), more than MAX_BATCH_ITEMS is 413.
 */
export function parseBatch(body: unknown): BatchItem[] {
  if (!Array.isArray(body))
    throw new ProtocolError("invalid_body", 'body must be a JSON array of {"page","counter","change","id"}');
  if (body.length > MAX_BATCH_ITEMS)
    throw new ProtocolError("payload_too_large", `a batch holds at most ${MAX_BATCH_ITEMS} items`);
  if (body.length === 0) throw new ProtocolError("invalid_body", "a batch holds at least one item");
  return body.map((item: unknown, i): BatchItem => {
    if (typeof item !== "object" || item === null || Array.isArray(item))
      throw new ProtocolError("invalid_body", `item ${i} must be an object`);
    const { page, counter, change, id } = item as Record<string, unknown>;
    if (!isPageId(page))
      throw new ProtocolError("invalid_page", `item ${i}: page id must be 1..128 printable ASCII characters`);
    if (!isCounterName(counter))
      throw new ProtocolError("invalid_counter", `item ${i}: counter name must be 1..64 of [A-Za-z0-9_:.-]`);
    if (!isChange(change))
      throw new ProtocolError(
        "invalid_body",
        `item ${i}: change must be a non-zero integer from -${MAX_CHANGE} to ${MAX_CHANGE}`,
      );
    if (!isIdempotencyKey(id))
      throw new ProtocolError(
        "invalid_idempotency_key",
        `item ${i}: id must be 1..128 printable ASCII characters`,
      );
    return { page, counter, change, id };
  });
}

/** An opaque listing cursor: the last page id returned, base64url-encoded. */
export function encodeCursor(lastPage: string): string {
  return Buffer.from(lastPage, "latin1").toString("base64url");
}

export function decodeCursor(cursor: string): string {
  const page = CURSOR.test(cursor) ? Buffer.from(cursor, "base64url").toString("latin1") : "";
  if (!isPageId(page)) throw new ProtocolError("invalid_query", "cursor is malformed");
  return page;
}

function decodeSegment(raw: string, code: "invalid_page" | "invalid_counter"): string {
  try {
    return decodeURIComponent(raw);
  } catch (err) {
    throw new ProtocolError(code, "path segment is not valid percent-encoding", { cause: err });
  }
}

/** `page` and `counter` of `/v1/pages/{page}/counters/{counter}`, percent-decoded and checked. */
export function counterPath(rawPage: string, rawCounter: string): { page: string; counter: string } {
  const page = decodeSegment(rawPage, "invalid_page");
  if (!isPageId(page)) throw new ProtocolError("invalid_page");
  const counter = decodeSegment(rawCounter, "invalid_counter");
  if (!isCounterName(counter)) throw new ProtocolError("invalid_counter");
  return { page, counter };
}

function rawFlag(v: string | null): boolean {
  if (v === null || v === "false" || v === "0") return false;
  if (v === "true" || v === "1" || v === "") return true;
  throw new ProtocolError("invalid_query", "raw must be true or false");
}

function limitOf(v: string | null): number {
  if (v === null) return DEFAULT_LIST_LIMIT;
  const n = /^\d{1,6}$/.test(v) ? Number(v) : 0;
  if (n < 1 || n > MAX_READ_PAGES)
    throw new ProtocolError("invalid_query", `limit must be an integer from 1 to ${MAX_READ_PAGES}`);
  return n;
}

export class CountersApi {
  readonly #o: CountersApiOptions;

  constructor(options: CountersApiOptions) {
    this.#o = options;
  }

  /**
   * `POST /v1/counters/increment`: each item exactly once by its id, answered in order. `charge`
   * takes the batch's cost (one rate token per item, the request's own taken before) once it is
   * valid, or throws.
   */
  async increment(reply: Reply, charge: (items: number) => void): Promise<void> {
    const items = parseBatch(parseJson(await readBody(reply, MAX_BATCH_BODY_BYTES)));
    charge(items.length);
    // An id is scoped to its page. The first item with a (page, id) is sent; later ones share its
    // answer when they ask for the same change, and conflict otherwise, whatever the timing.
    const firstOf = new Map<string, number>();
    const sent: number[] = [];
    const sameAs: Array<number | undefined> = items.map((item, i) => {
      const k = `${item.page}\u0000${item.id}`;
      const first = firstOf.get(k);
      if (first === undefined) {
        firstOf.set(k, i);
        sent.push(i);
      }
      return first;
    });
    const results: ItemResult[] = new Array<ItemResult>(items.length);
    await Promise.all(
      sent.map(async (i) => {
        results[i] = await this.#incrementOne(items[i]!);
      }),
    );
    items.forEach((item, i) => {
      const first = sameAs[i];
      if (first === undefined) return;
      const original = items[first]!;
      const answer = results[first]!;
      const { page, counter, id } = item;
      if (original.counter !== item.counter || original.change !== item.change) {
        const e = new ProtocolError("idempotency_conflict", `item ${first} used this id for another change`);
        results[i] = { page, counter, id, error: { code: e.code, message: e.message } };
      } else results[i] = "error" in answer ? answer : { ...answer, duplicate: true };
    });
    reply.json(200, { results }, NO_STORE);
  }

  async #incrementOne(item: BatchItem): Promise<ItemResult> {
    const { page, counter, id } = item;
    try {
      const r = await this.#o.increments.increment({
        type: "increment",
        page,
        counter,
        delta: item.change,
        key: id,
      });
      return { page, counter, id, value: r.value, updated_at: r.updatedAt, duplicate: r.duplicate };
    } catch (err) {
      const e = err instanceof ProtocolError ? err : new ProtocolError("internal", undefined, { cause: err });
      return { page, counter, id, error: { code: e.code, message: e.message } };
    }
  }

  /**
   * `GET /v1/counters?page=a&page=b` (each page summed, or raw with `raw=true`) or
   * `GET /v1/counters?prefix=p&limit=n&cursor=c` (pages under a prefix in byte order, paginated).
   */
  async read(reply: Reply, req: RequestInfo, access: ReadAccess): Promise<void> {
    const q = new URLSearchParams(req.query);
    const pages = [...new Set(q.getAll("page"))];
    const prefix = q.get("prefix");
    const raw = rawFlag(q.get("raw"));
    if (pages.length > 0 && prefix !== null)
      throw new ProtocolError("invalid_query", "give page=... or prefix=..., not both");
    if (prefix === null) {
      if (pages.length === 0)
        throw new ProtocolError("invalid_query", "give page=... (repeatable) or prefix=...");
      if (pages.length > MAX_READ_PAGES)
        throw new ProtocolError("invalid_query", `at most ${MAX_READ_PAGES} pages per request`);
      for (const page of pages) if (!isPageId(page)) throw new ProtocolError("invalid_page");
      await access.admit(pages);
      return reply.json(200, { pages: await this.#readPages(pages, raw) }, NO_STORE);
    }
    access.requireKey();
    if (!isPagePrefix(prefix))
      throw new ProtocolError("invalid_query", "prefix must be 0..128 printable ASCII characters");
    const limit = limitOf(q.get("limit"));
    const cursorParam = q.get("cursor");
    const cursor = cursorParam === null || cursorParam === "" ? undefined : decodeCursor(cursorParam);
    // Any counter node answers a listing; a random partition's owner spreads them.
    const list = await this.#o.owners.request(Math.floor(Math.random() * this.#o.partitions), {
      type: "list_pages",
      prefix,
      ...(cursor !== undefined ? { cursor } : {}),
      limit,
    });
    reply.json(
      200,
      {
        pages: await this.#readPages(list.pages, raw),
        cursor: list.cursor !== undefined ? encodeCursor(list.cursor) : null,
      },
      NO_STORE,
    );
  }

  async #readPages(pages: readonly string[], raw: boolean): Promise<unknown[]> {
    return Promise.all(
      pages.map(async (page) => {
        const state = await this.#o.owners.forPage(page, { type: "snapshot", page });
        return raw ? rawBody(page, state, this.#o.liveness) : totalsBody(page, state, this.#o.liveness);
      }),
    );
  }

  /**
   * `POST /v1/pages/{page}/counters/{counter}/reset` (observed reset to zero) and, with
   * `tombstone`, `DELETE /v1/pages/{page}/counters/{counter}`. Idempotent by `Idempotency-Key`.
   */
  async reset(
    reply: Reply,
    req: RequestInfo,
    page: string,
    counter: string,
    tombstone: boolean,
  ): Promise<void> {
    const key = req.headers["idempotency-key"] ?? randomUUID();
    if (!isIdempotencyKey(key)) throw new ProtocolError("invalid_idempotency_key");
    const r = await this.#o.owners.forPage(page, {
      type: "reset",
      page,
      counter,
      key,
      tombstone,
    });
    const body = {
      page,
      counter,
      value: 0,
      previous: r.previous,
      ...(tombstone ? { deleted: true } : {}),
      updated_at: r.updatedAt,
    };
    reply.json(200, body, r.duplicate ? REPLAYED : NO_STORE);
  }
}
