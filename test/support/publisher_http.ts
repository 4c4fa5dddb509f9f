/**
 * Plain HTTP calls to the publisher API of a real gateway, for tests: no SDK in between, so the
 * tests check the wire contract itself. Every call resolves with the status, the headers and the
 * decoded JSON body; nothing throws on an error status.
 */
export interface HttpAnswer<T = unknown> {
  readonly status: number;
  readonly headers: Headers;
  readonly body: T;
}

export interface ErrorBody {
  readonly error: { readonly code: string; readonly message: string };
}

export interface BatchItem {
  readonly page: string;
  readonly counter: string;
  readonly change: number;
  readonly id: string;
}

export type ItemResult =
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
      readonly error: ErrorBody["error"];
    };

export interface ResetBody {
  readonly page: string;
  readonly counter: string;
  readonly value: number;
  readonly previous: number;
  readonly deleted?: true;
  readonly updated_at: number;
}

export interface PageTotals {
  readonly page: string;
  readonly count: number;
  readonly viewers: number;
  readonly counters: Readonly<Record<string, number>>;
  readonly updated_at: number;
  /** This DC and the live DCs with entries on the page: who makes up the value. */
  readonly dcs: readonly string[];
  /** How long ago the stalest of them was heard, in ms. */
  readonly lag_ms: number;
}

export interface PageRaw {
  readonly page: string;
  readonly viewers: Readonly<Record<string, { p: number; n: number }>>;
  readonly counters: Readonly<Record<string, Readonly<Record<string, { p: number; n: number }>>>>;
  readonly updated_at: number;
}

export interface RequestOptions {
  readonly body?: unknown;
  readonly headers?: Readonly<Record<string, string>>;
  /** The publisher key; null sends no Authorization header. Default: the client's key. */
  readonly key?: string | null;
  readonly idempotencyKey?: string;
}

export class PublisherHttp {
  constructor(
    readonly baseUrl: string,
    readonly key: string,
  ) {}

  async request<T = unknown>(
    method: string,
    path: string,
    options: RequestOptions = {},
  ): Promise<HttpAnswer<T>> {
    const key = options.key === undefined ? this.key : options.key;
    const headers: Record<string, string> = { ...options.headers };
    if (key !== null) headers.authorization = `Bearer ${key}`;
    if (options.idempotencyKey !== undefined) headers["idempotency-key"] = options.idempotencyKey;
    let body: string | undefined;
    if (options.body !== undefined) {
      body = typeof options.body === "string" ? options.body : JSON.stringify(options.body);
      headers["content-type"] = "application/json";
    }
    const res = await fetch(`${this.baseUrl}${path}`, {
      method,
      headers,
      ...(body !== undefined ? { body } : {}),
    });
    const text = await res.text();
    let parsed: unknown = text;
    if ((res.headers.get("content-type") ?? "").startsWith("application/json")) parsed = JSON.parse(text);
    return { status: res.status, headers: res.headers, body: parsed as T };
  }

  /** PUT /v1/pages/{page}/counter. */
  change(page: string, counter: string, delta: number, idempotencyKey?: string): Promise<HttpAnswer> {
    return this.request("PUT", `/v1/pages/${encodeURIComponent(page)}/counter`, {
      body: { action: delta < 0 ? "decrement" : "increment", counter, by: Math.abs(delta) },
      ...(idempotencyKey !== undefined ? { idempotencyKey } : {}),
    });
  }

  batch(
    items: unknown,
    options: RequestOptions = {},
  ): Promise<HttpAnswer<{ results: ItemResult[] } & Partial<ErrorBody>>> {
    return this.request("POST", "/v1/counters/increment", { body: items, ...options });
  }

  reset(
    page: string,
    counter: string,
    options: RequestOptions = {},
  ): Promise<HttpAnswer<ResetBody & Partial<ErrorBody>>> {
    return this.request("POST", `${counterPath(page, counter)}/reset`, options);
  }

  remove(
    page: string,
    counter: string,
    options: RequestOptions = {},
  ): Promise<HttpAnswer<ResetBody & Partial<ErrorBody>>> {
    return this.request("DELETE", counterPath(page, counter), options);
  }

  /**
   * GET /v1/counters with a raw query string, with the client's publisher key (listings need a
   * key; keyed reads spend no address budget) unless `options.key` says otherwise.
   */
  read<T = { pages: PageTotals[]; cursor?: string | null } & Partial<ErrorBody>>(
    query: string,
    options: RequestOptions = {},
  ): Promise<HttpAnswer<T>> {
    return this.request<T>("GET", `/v1/counters${query === "" ? "" : `?${query}`}`, options);
  }

  /** The summed totals of pages, asserting a 200. */
  async totals(...pages: string[]): Promise<PageTotals[]> {
    const res = await this.read(pages.map((p) => `page=${encodeURIComponent(p)}`).join("&"));
    if (res.status !== 200) throw new Error(`GET /v1/counters: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body.pages;
  }

  /** One page's visible counters. */
  async counters(page: string): Promise<Readonly<Record<string, number>>> {
    const [totals] = await this.totals(page);
    return totals!.counters;
  }
}

/** The i-th of many counter names of the longest length a name may have (64 characters). */
export const longCounterName = (i: number): string => `c${String(i).padStart(63, "0")}`;

export function counterPath(page: string, counter: string): string {
  return `/v1/pages/${encodeURIComponent(page)}/counters/${encodeURIComponent(counter)}`;
}

/** Calls `fn` until it resolves (the network may fail it): how a client retries with the same key. */
export async function retrying<T>(fn: () => Promise<T>, attempts = 50): Promise<{ value: T; tries: number }> {
  for (let tries = 1; ; tries++) {
    try {
      return { value: await fn(), tries };
    } catch (err) {
      if (tries >= attempts) throw err;
    }
  }
}
