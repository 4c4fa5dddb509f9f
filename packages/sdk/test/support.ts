/** Shared pieces of the SDK's tests: clients with fast retries and unique page ids. */
import { randomUUID } from "node:crypto";
import WebSocket from "ws";
import { LivecountClient, type LivecountClientOptions, type LivecountError } from "../src/index.js";
import { TEST_PUBLISHER_KEY } from "../../../test/support/platform.js";

/** Retries fast enough for a test and many enough to outlast a lossy link (0.3^20 is never). */
export const FAST_RETRY = { attempts: 20, baseMs: 1, maxMs: 20 } as const;

/** A page id no other test uses. */
export function uniquePage(label: string): string {
  return `sdk-${label}-${randomUUID().slice(0, 8)}`;
}

/** A client of `baseUrl` with the test key, fast retries and the `ws` package's WebSocket (Node 20 has none). */
export function testClient(
  baseUrl: string,
  options: Partial<LivecountClientOptions> = {},
): { client: LivecountClient; errors: LivecountError[] } {
  const errors: LivecountError[] = [];
  const client = new LivecountClient({
    baseUrl,
    publisherKey: TEST_PUBLISHER_KEY,
    WebSocket,
    retry: FAST_RETRY,
    onError: (e) => errors.push(e),
    ...options,
  });
  return { client, errors };
}
