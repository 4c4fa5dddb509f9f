/** Shared pieces of the SDK's tests: clients with fast retries and unique page ids. */
import { randomUUID } from "node:crypto";
import { afterAll, afterEach, beforeAll } from "vitest";
import WebSocket from "ws";
import {
  LivecountClient,
  type CountUpdate,
  type LivecountClientOptions,
  type LivecountError,
} from "../src/index.js";
import { LossyProxy } from "../../../test/support/lossy_proxy.js";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { mulberry32, testSeed } from "../../../test/support/prng.js";
import { FaultProxy } from "./fault_proxy.js";

/** Retries fast enough for a test and many enough to outlast a lossy link (0.3^20 is never). */
export const FAST_RETRY = { attempts: 20, baseMs: 1, maxMs: 20 } as const;

/** A listener that records every update it gets, in order. */
export function recorder(): {
  updates: CountUpdate[];
  listener: (u: CountUpdate) => void;
  last: () => CountUpdate | undefined;
} {
  const updates: CountUpdate[] = [];
  return { updates, listener: (u) => updates.push(u), last: () => updates.at(-1) };
}

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

/** A real embedded gateway for a test file, with the proxies and clients its tests open. */
export interface GatewayFixture {
  readonly platform: TestPlatform;
  /** A proxy that records requests and injects faults on demand. */
  proxy(): Promise<FaultProxy>;
  /** A link that loses 30% of the answers after the server handled the request (seeded). */
  lossy(label: string): Promise<LossyProxy>;
  /** A test client (see testClient), closed after the test. */
  client(baseUrl: string, options?: Partial<LivecountClientOptions>): ReturnType<typeof testClient>;
  /** Closes a client the test made itself after the test. */
  own(client: LivecountClient): LivecountClient;
}

/**
 * Starts a gateway (with `env` on top of the test settings) before the file's tests and stops it
 * after; closes each test's clients and proxies after the test. `defaults` apply to every client.
 */
export function useGateway(
  defaults: Partial<LivecountClientOptions> = {},
  env: Readonly<Record<string, string>> = {},
): GatewayFixture {
  let platform: TestPlatform | undefined;
  const proxies: Array<{ close(): Promise<void> }> = [];
  const clients: LivecountClient[] = [];
  beforeAll(async () => {
    platform = await TestPlatform.start(env);
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.close().catch(() => {})));
    await Promise.all(proxies.splice(0).map((p) => p.close()));
  });
  afterAll(async () => {
    await platform?.close();
  });
  const started = (): TestPlatform => {
    if (platform === undefined) throw new Error("the gateway starts in beforeAll");
    return platform;
  };
  return {
    get platform() {
      return started();
    },
    async proxy() {
      const p = await FaultProxy.start(started().app.port);
      proxies.push(p);
      return p;
    },
    async lossy(label) {
      const random = mulberry32(testSeed(label)).next;
      const p = await LossyProxy.start(
        { host: "127.0.0.1", port: started().app.port },
        { dropShare: 0.3, random },
      );
      proxies.push(p);
      return p;
    },
    client(baseUrl, options = {}) {
      const made = testClient(baseUrl, { ...defaults, ...options });
      clients.push(made.client);
      return made;
    },
    own(client) {
      clients.push(client);
      return client;
    },
  };
}
