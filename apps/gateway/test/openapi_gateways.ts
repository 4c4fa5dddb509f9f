/**
 * What the OpenAPI document test (openapi.test.ts) drives: two gateways, a healthy one and one
 * with rate and connection limits low enough to run out of, and a client that checks each
 * exchange with either against docs/openapi.json.
 */
import { afterAll, beforeAll, expect } from "vitest";
import type { OpenApiDoc } from "../../../test/support/openapi.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";

/** The gateways (uWS on a free port, counter node, in-memory bus and store) the test drives. */
export interface OpenApiGateways {
  /** Pages under "openapi-private-" are private; viewers join with a secret. */
  readonly platform: TestPlatform;
  /**
   * Rates of one a second: a burst of one per publisher key and for reads without a key, of 20
   * requests per address; room for one connection.
   */
  readonly limited: TestPlatform;
}

/**
 * Starts both gateways before the tests of the enclosing describe block and closes them after
 * them. They are there from the first test on.
 */
export function openApiGateways(): OpenApiGateways {
  let platform: TestPlatform | undefined;
  let limited: TestPlatform | undefined;

  beforeAll(async () => {
    platform = await TestPlatform.start({
      LIVECOUNT_PRIVATE_PREFIXES: "openapi-private-",
      LIVECOUNT_JOIN_SECRET: "openapi-join-secret-0123456789abcdef",
    });
    limited = await TestPlatform.start({
      LIVECOUNT_PUBLISHER_RATE: "1",
      LIVECOUNT_PUBLISHER_BURST: "1",
      LIVECOUNT_READ_RATE: "1",
      LIVECOUNT_READ_BURST: "1",
      // One event stream fills it (HTTP requests do not count).
      LIVECOUNT_MAX_CONNECTIONS: "1",
      // Room for the requests without a key before the probes, which then run out of it.
      LIVECOUNT_HTTP_RATE: "1",
      LIVECOUNT_HTTP_BURST: "20",
    });
  });

  afterAll(async () => {
    await platform?.close();
    await limited?.close();
  });

  const running = (gateway: TestPlatform | undefined): TestPlatform => {
    if (gateway === undefined) throw new Error("the gateways are started before the tests, not before");
    return gateway;
  };
  return {
    get platform() {
      return running(platform);
    },
    get limited() {
      return running(limited);
    },
  };
}

export interface Call {
  readonly method?: string;
  readonly body?: unknown;
  /** The bearer key; the publisher key when left out, no authorization header when null. */
  readonly key?: string | null;
  readonly idempotencyKey?: string;
  /** Component response to check against when no operation has this method and path. */
  readonly fallback?: string;
}

/** Requests whose every exchange is checked against the document (which records what it saw). */
export interface DocumentedHttp {
  /** Makes a request and checks the exchange against the document; returns the status and JSON body. */
  call(
    base: string,
    target: string,
    options?: Call,
  ): Promise<{ status: number; body: unknown; headers: Headers }>;
  /**
   * Opens an event stream and checks its answer against the document: a refusal whole, a stream up
   * to the end of its first event. The stream stays open until `close()`.
   */
  stream(
    base: string,
    target: string,
    key?: string | null,
  ): Promise<{ status: number; text: string; close: () => void }>;
  /** A request body the test sends as valid must be valid by the document too. */
  expectDocumentedRequest(method: string, path: string, body: unknown): void;
}

export function documentedHttp(doc: OpenApiDoc): DocumentedHttp {
  async function call(
    base: string,
    target: string,
    options: Call = {},
  ): Promise<{ status: number; body: unknown; headers: Headers }> {
    const method = options.method ?? "GET";
    const headers: Record<string, string> = {};
    const key = options.key === undefined ? TEST_PUBLISHER_KEY : options.key;
    if (key !== null) headers.authorization = `Bearer ${key}`;
    if (options.idempotencyKey !== undefined) headers["idempotency-key"] = options.idempotencyKey;
    let body: string | undefined;
    if (options.body !== undefined) {
      body = typeof options.body === "string" ? options.body : JSON.stringify(options.body);
      headers["content-type"] = "application/json";
    }
    const res = await fetch(`${base}${target}`, { method, headers, ...(body !== undefined ? { body } : {}) });
    const text = await res.text();
    const path = target.split("?")[0]!;
    doc.check({ method, path, status: res.status, headers: res.headers, text }, options.fallback);
    const json = (res.headers.get("content-type") ?? "").startsWith("application/json")
      ? (JSON.parse(text) as unknown)
      : text;
    return { status: res.status, body: json, headers: res.headers };
  }

  async function stream(
    base: string,
    target: string,
    key: string | null = TEST_PUBLISHER_KEY,
  ): Promise<{ status: number; text: string; close: () => void }> {
    const controller = new AbortController();
    const headers: Record<string, string> = key === null ? {} : { authorization: `Bearer ${key}` };
    const res = await fetch(`${base}${target}`, { headers, signal: controller.signal });
    let text = "";
    if (res.status !== 200) text = await res.text();
    else {
      const reader = res.body!.getReader();
      const decoder = new TextDecoder();
      const firstEvent = /event: count\n[^]*?\n\n/;
      while (!firstEvent.test(text)) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      const match = firstEvent.exec(text);
      if (match !== null) text = text.slice(0, match.index + match[0].length);
    }
    doc.check({ method: "GET", path: target.split("?")[0]!, status: res.status, headers: res.headers, text });
    return { status: res.status, text, close: () => controller.abort() };
  }

  function expectDocumentedRequest(method: string, path: string, body: unknown): void {
    expect(doc.violations(doc.requestSchema(method, path), body)).toEqual([]);
  }

  return { call, stream, expectDocumentedRequest };
}
