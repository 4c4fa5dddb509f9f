import { randomBytes } from "node:crypto";
import { connectBus, openStore } from "@livecount/cluster";
import { CounterNode, readCounterConfig } from "@livecount/counter";
import { Gateway, readGatewayConfig } from "@livecount/gateway";
import { silentLogger, type Env, type Logger } from "@livecount/runtime";
import type { Store } from "@livecount/store";
import { Registry, collectDefaultMetrics } from "prom-client";
import { DemoRoutes } from "./demo_routes.js";

export interface StandaloneOptions {
  /** Configuration variables; default process.env. */
  readonly env?: Env;
  readonly logger?: Logger;
  /** Registers Node's default process metrics too (the process-wide entry point does). */
  readonly processMetrics?: boolean;
}

export interface Standalone {
  readonly port: number;
  /** http://127.0.0.1:<port> */
  readonly url: string;
  /** The publisher keys in force (a generated development key when none was configured). */
  readonly publisherKeys: readonly string[];
  readonly gateway: Gateway;
  readonly counter: CounterNode;
  close(): Promise<void>;
}

/** The demo page's page id: the only page the demo routes (demo_routes.ts) change. */
export const DEMO_PAGE = "demo";

/** The URL this process reaches its own gateway at: loopback when it listens on every address. */
function selfUrl(host: string, port: number): string {
  if (host === "0.0.0.0" || host === "") return `http://127.0.0.1:${port}`;
  if (host === "::") return `http://[::1]:${port}`;
  return host.includes(":") ? `http://[${host}]:${port}` : `http://${host}:${port}`;
}

/**
 * Runs a gateway and a counter node in one process. Without LIVECOUNT_NATS_URL and
 * LIVECOUNT_REDIS_URL they share the in-memory bus and store: no external server at all.
 */
export async function startStandalone(options: StandaloneOptions = {}): Promise<Standalone> {
  const env = { ...(options.env ?? process.env) };
  const logger = options.logger ?? silentLogger;
  let devKey: string | undefined;
  if ((env.LIVECOUNT_PUBLISHER_KEYS ?? "").trim() === "") {
    devKey = `dev-${randomBytes(12).toString("hex")}`;
    env.LIVECOUNT_PUBLISHER_KEYS = devKey;
  }
  const gatewayConfig = readGatewayConfig(env);
  const counterConfig = readCounterConfig(env);
  const registry = new Registry();
  if (options.processMetrics === true) collectDefaultMetrics({ register: registry });

  const bus = await connectBus(gatewayConfig, logger);
  let store: Store;
  try {
    store = await openStore(counterConfig, logger);
  } catch (err) {
    await bus.close();
    throw err;
  }
  const demo = env.LIVECOUNT_DEMO !== "0" ? new DemoRoutes({ page: DEMO_PAGE, logger }) : undefined;
  const gateway = new Gateway({
    config: gatewayConfig,
    bus,
    logger,
    registry,
    ...(demo !== undefined ? { routes: demo.routes } : {}),
  });
  const counter = new CounterNode({ config: counterConfig, bus, store, logger, registry });
  const port = await gateway.start();
  await counter.start();
  const url = selfUrl(gatewayConfig.host, port);
  // The demo's buttons go through the SDK with a configured key, as a site's back end would.
  demo?.connect(url, gatewayConfig.publisherKeys[0]!);
  if (devKey !== undefined)
    logger.warn({ publisherKey: devKey }, "no LIVECOUNT_PUBLISHER_KEYS set; generated a development key");

  let closed: Promise<void> | undefined;
  return {
    port,
    url,
    publisherKeys: gatewayConfig.publisherKeys,
    gateway,
    counter,
    close: () =>
      (closed ??= (async () => {
        await demo?.close();
        await gateway.stop();
        await counter.stop();
        await store.close();
        await bus.close();
      })()),
  };
}
