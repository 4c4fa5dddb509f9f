/**
 * The embedded platform for integration tests: a real standalone process-in-process (uWS gateway on
 * a free port, counter node, in-memory bus and store), real WebSocket clients and real HTTP. The
 * environment is built from scratch, never inherited, so a developer's LIVECOUNT_NATS_URL or
 * LIVECOUNT_REDIS_URL cannot turn these into tests of something else.
 */
import { startStandalone, type Standalone } from "@livecount/standalone";
import { eventually } from "./eventually.js";
import { TestClient, type ClientOptions } from "./ws_client.js";

/** The publisher key every test platform accepts. */
export const TEST_PUBLISHER_KEY = "test-publisher-key-0001";
/** The admin key every test platform accepts (`/metrics`, prefix listings). */
export const TEST_ADMIN_KEY = "test-admin-key-000000001";
/** Headers that authorize `/metrics` on a test platform. */
export const ADMIN_HEADERS: Readonly<Record<string, string>> = { authorization: `Bearer ${TEST_ADMIN_KEY}` };

/**
 * Settings that keep the suite fast. Grace is short where it is not the subject; tests about grace
 * or the idle timeout set their own.
 */
export const TEST_ENV: Readonly<Record<string, string>> = {
  LIVECOUNT_PORT: "0",
  LIVECOUNT_HOST: "127.0.0.1",
  LIVECOUNT_GRACE_MS: "300",
  LIVECOUNT_COALESCE_MS: "20",
  LIVECOUNT_PUBLISHER_KEYS: TEST_PUBLISHER_KEY,
  LIVECOUNT_ADMIN_KEY: TEST_ADMIN_KEY,
  LIVECOUNT_DEMO: "0",
};

export interface CounterBody {
  readonly page: string;
  readonly count: number;
  readonly viewers: number;
  readonly active: number;
  readonly connections: number;
  readonly counters: Readonly<Record<string, number>>;
  readonly updated_at: number;
}

export class TestPlatform {
  readonly #clients = new Set<TestClient>();

  private constructor(readonly app: Standalone) {}

  /**
   * Starts a platform with TEST_ENV plus `env`, and waits until /readyz says it is ready. `fetch`
   * reaches it (one trusting a test's own certificate when it serves TLS).
   */
  static async start(
    env: Readonly<Record<string, string>> = {},
    fetch: typeof globalThis.fetch = globalThis.fetch,
  ): Promise<TestPlatform> {
    const app = await startStandalone({ env: { ...TEST_ENV, ...env } });
    const platform = new TestPlatform(app);
    try {
      await eventually(async () => {
        const res = await fetch(`${app.url}/readyz`);
        if (res.status !== 200) throw new Error(`readyz ${res.status}`);
      });
    } catch (err) {
      await app.close();
      throw err;
    }
    return platform;
  }

  get url(): string {
    return this.app.url;
  }

  /** ws://, or wss:// when the platform serves TLS. */
  get wsUrl(): string {
    return `${this.app.url.startsWith("https:") ? "wss" : "ws"}://127.0.0.1:${this.app.port}/ws`;
  }

  /** Opens a client, closed with the platform. */
  async connect(options: ClientOptions = {}): Promise<TestClient> {
    const client = await TestClient.connect(this.wsUrl, options);
    this.#clients.add(client);
    return client;
  }

  /** Opens a client that watches `page` and has received its first count frame. */
  async watcher(page: string, options: ClientOptions = {}): Promise<TestClient> {
    const client = await this.connect(options);
    client.watch(page);
    await client.next((f) => f.type === "count" && f.page === page);
    return client;
  }

  /** GET /v1/pages/{page}/counter, decoded. */
  async counter(page: string): Promise<CounterBody> {
    const res = await fetch(`${this.url}/v1/pages/${encodeURIComponent(page)}/counter`);
    if (res.status !== 200) throw new Error(`GET counter of ${page}: ${res.status} ${await res.text()}`);
    return (await res.json()) as CounterBody;
  }

  /** Waits until the HTTP API reports `viewers` on `page`. */
  async waitForViewers(page: string, viewers: number, timeoutMs = 5000): Promise<void> {
    await eventually(
      async () => {
        const body = await this.counter(page);
        if (body.viewers !== viewers)
          throw new Error(`page ${page}: viewers ${body.viewers}, want ${viewers}`);
      },
      { timeoutMs },
    );
  }

  /** The Prometheus text of /metrics (with the admin key). */
  async metricsText(): Promise<string> {
    const res = await fetch(`${this.url}/metrics`, { headers: ADMIN_HEADERS });
    if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
    return res.text();
  }

  /** Closes the clients still open, then the platform. */
  async close(): Promise<void> {
    await Promise.all([...this.#clients].map((c) => c.terminate()));
    await this.app.close();
  }
}
