import { randomBytes } from "node:crypto";
import { claimGatewayId, connectBus, openStore } from "@livecount/cluster";
import { CounterNode, readCounterConfig, startWarnings } from "@livecount/counter";
import {
  Gateway,
  connectionsOverFileLimit,
  openFilesLimit,
  readGatewayConfig,
  type GatewayConfig,
} from "@livecount/gateway";
import { readFlag, readInt, silentLogger, systemClock, type Env, type Logger } from "@livecount/runtime";
import type { FetchFn } from "@livecount/sdk";
import type { Store } from "@livecount/store";
import { Registry, collectDefaultMetrics } from "prom-client";
import { Agent, fetch as undiciFetch } from "undici";
import { DemoRoutes } from "./demo_routes.js";

export interface StandaloneOptions {
  /** Configuration variables; default process.env. */
  readonly env?: Env;
  readonly logger?: Logger;
  /** Registers Node's default process metrics too (the process-wide entry point does). */
  readonly processMetrics?: boolean;
  /**
   * Called once a later process took its LIVECOUNT_NODE_ID (on NATS), as a counter node (the
   * counter node stopped) or as a gateway (the gateway stopped): this one no longer counts, so the
   * process should exit (the process entry point does). `what` names which.
   */
  readonly onSuperseded?: (what: "counter node" | "gateway") => void;
}

export interface Standalone {
  readonly port: number;
  /** http://127.0.0.1:<port> */
  readonly url: string;
  /** The publisher keys in force (a generated development key when none was configured). */
  readonly publisherKeys: readonly string[];
  /** The admin key in force (a generated development key when none was configured). */
  readonly adminKey: string;
  readonly gateway: Gateway;
  readonly counter: CounterNode;
  close(): Promise<void>;
}

/** The demo page's page id: the only page the demo routes (demo_routes.ts) change. */
export const DEMO_PAGE = "demo";

/** The URL this process reaches its own gateway at: loopback when it listens on every address. */
function selfUrl(host: string, port: number, tls: boolean): string {
  const scheme = tls ? "https" : "http";
  if (host === "0.0.0.0" || host === "") return `${scheme}://127.0.0.1:${port}`;
  if (host === "::") return `${scheme}://[::1]:${port}`;
  return host.includes(":") ? `${scheme}://[${host}]:${port}` : `${scheme}://${host}:${port}`;
}

/**
 * The fetch the demo reaches its own gateway with. Over TLS the certificate names the public host,
 * not the local address the demo dials, so this one connection (to this very process, on a local
 * address) does not check it; everything else keeps Node's checks.
 */
function selfFetch(config: GatewayConfig): FetchFn | undefined {
  if (config.tls === undefined) return undefined;
  const dispatcher = new Agent({ connect: { rejectUnauthorized: false } });
  return ((input: string, init?: RequestInit) =>
    undiciFetch(input, { ...(init as object), dispatcher })) as unknown as FetchFn;
}

/** Development keys for what was not configured, so `npm start` works at once; each is printed. */
function withDevKeys(env: Record<string, string | undefined>): Record<string, string> {
  const generated: Record<string, string> = {};
  if ((env.LIVECOUNT_PUBLISHER_KEYS ?? "").trim() === "")
    generated.LIVECOUNT_PUBLISHER_KEYS = `dev-${randomBytes(12).toString("hex")}`;
  if ((env.LIVECOUNT_ADMIN_KEY ?? "").trim() === "")
    generated.LIVECOUNT_ADMIN_KEY = `dev-admin-${randomBytes(16).toString("hex")}`;
  // With the in-memory store the registers live as long as the process: a key of its own hides
  // from scripts which viewer ids fill which register. A store that outlives it needs the same key
  // every time, set by the operator.
  const memoryStore = (env.LIVECOUNT_REDIS_URL ?? "") === "" && (env.LIVECOUNT_REDIS_CLUSTER ?? "") === "";
  if ((env.LIVECOUNT_VISITOR_KEY ?? "") === "" && memoryStore)
    env.LIVECOUNT_VISITOR_KEY = randomBytes(24).toString("hex");
  Object.assign(env, generated);
  return generated;
}

/**
 * Runs a gateway and a counter node in one process. Without LIVECOUNT_NATS_URL and
 * LIVECOUNT_REDIS_URL they share the in-memory bus and store: no external server at all.
 */
export async function startStandalone(options: StandaloneOptions = {}): Promise<Standalone> {
  const env = { ...(options.env ?? process.env) };
  const logger = options.logger ?? silentLogger;
  const devKeys = withDevKeys(env);
  const gatewayConfig = readGatewayConfig(env);
  const counterConfig = readCounterConfig(env);
  // The demo's own budget for all browsers together; a trickle, as it writes without a key.
  const demoOn = readFlag(env, "LIVECOUNT_DEMO", true);
  const budget = {
    ratePerS: readInt(env, "LIVECOUNT_DEMO_RATE", 5, { min: 1 }),
    burst: readInt(env, "LIVECOUNT_DEMO_BURST", 20, { min: 1 }),
  };
  const registry = new Registry();
  if (options.processMetrics === true) collectDefaultMetrics({ register: registry });

  const bus = await connectBus(gatewayConfig, logger);
  let store: Store;
  try {
    // On NATS its gateway is one of the DC's: one process per gateway node id (gateway_id.ts).
    const { dc, nodeId: node, gatewayLeaseMs: leaseMs } = gatewayConfig;
    if (gatewayConfig.natsUrl !== undefined)
      await claimGatewayId(bus, systemClock, logger, { dc, node, leaseMs });
    store = await openStore(counterConfig, logger);
  } catch (err) {
    await bus.close();
    throw err;
  }
  const demo = demoOn
    ? new DemoRoutes({ page: DEMO_PAGE, logger, budget, now: () => systemClock.now() })
    : undefined;
  const gateway = new Gateway({
    config: gatewayConfig,
    bus,
    logger,
    registry,
    ...(demo !== undefined ? { routes: demo.routes } : {}),
    // Only on NATS: in-process, no other process can share its id. Its sockets are handed over
    // (closed, `down` said) before the process is told.
    ...(options.onSuperseded !== undefined && gatewayConfig.natsUrl !== undefined
      ? { onSuperseded: () => void gateway.stop().finally(() => options.onSuperseded?.("gateway")) }
      : {}),
  });
  const counter = new CounterNode({
    config: counterConfig,
    bus,
    store,
    logger,
    registry,
    ...(options.onSuperseded !== undefined
      ? { onSuperseded: () => options.onSuperseded?.("counter node") }
      : {}),
  });
  const port = await gateway.start();
  try {
    await counter.start();
  } catch (err) {
    // Refused (its node id in use): nothing of this process may stay open.
    await demo?.close();
    await gateway.stop();
    await store.close();
    await bus.close();
    throw err;
  }
  const url = selfUrl(gatewayConfig.host, port, gatewayConfig.tls !== undefined);
  // The demo's buttons go through the SDK with a configured key, as a site's back end would.
  demo?.connect(url, gatewayConfig.publisherKeys[0]!, selfFetch(gatewayConfig));
  if (devKeys.LIVECOUNT_PUBLISHER_KEYS !== undefined)
    logger.warn(
      { publisherKey: devKeys.LIVECOUNT_PUBLISHER_KEYS },
      "no LIVECOUNT_PUBLISHER_KEYS set; generated a development key",
    );
  for (const warning of startWarnings(counterConfig)) logger.warn(warning);
  const overFiles = connectionsOverFileLimit(
    gatewayConfig.maxConnections,
    gatewayConfig.listenSockets,
    openFilesLimit(),
  );
  if (overFiles !== undefined) logger.warn(overFiles);
  if (devKeys.LIVECOUNT_ADMIN_KEY !== undefined)
    logger.warn(
      { adminKey: devKeys.LIVECOUNT_ADMIN_KEY },
      "no LIVECOUNT_ADMIN_KEY set; generated a development key for /metrics, listings and the console at /admin",
    );

  let closed: Promise<void> | undefined;
  return {
    port,
    url,
    publisherKeys: gatewayConfig.publisherKeys,
    adminKey: gatewayConfig.adminKey!,
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
