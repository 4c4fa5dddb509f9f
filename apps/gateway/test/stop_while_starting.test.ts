import { MemoryBus } from "@livecount/bus";
import { silentLogger } from "@livecount/runtime";
import { Registry } from "prom-client";
import { expect, test } from "vitest";
import { Gateway } from "../src/gateway.js";
import { readGatewayConfig } from "../src/gateway_config.js";
import { GatewayStoppedError } from "../src/ring_wait.js";

/**
 * A gateway superseded under its node id while it still waits for the ring (gateway_id.ts) is
 * stopped then: its start gives up at once and takes no sockets, and the stop, asked again by a
 * signal meanwhile, is the same stop.
 */
test("gateway - a stop while the gateway waits for the ring ends its start at once, with no socket taken", async () => {
  const bus = new MemoryBus();
  const config = readGatewayConfig({ LIVECOUNT_HOST: "127.0.0.1", LIVECOUNT_PORT: "0" });
  // No counter node on this bus: the start would wait a minute for the ring.
  const gateway = new Gateway({
    config,
    bus,
    logger: silentLogger,
    registry: new Registry(),
    ringWaitMs: 60_000,
  });
  const started = gateway.start();
  const settled = started.then(
    () => "listening",
    (err: unknown) => err,
  );
  await new Promise((resolve) => setTimeout(resolve, 50));
  const at = performance.now();
  const stop = gateway.stop();
  expect(gateway.stop()).toBe(stop);
  await stop;
  expect(await settled).toBeInstanceOf(GatewayStoppedError);
  expect(performance.now() - at).toBeLessThan(5_000);
  expect(gateway.ready).toBe(false);
  await bus.close();
});
