/**
 * The gateway's own settings (gateway_config.ts) at their bounds: each default, each bound taken,
 * one past it refused with a ConfigError that names the variable. The edge's settings have
 * edge_config.test.ts; the cluster's, packages/cluster.
 */
import { describe, expect, test } from "vitest";
import { readGatewayConfig, type GatewayConfig } from "../src/gateway_config.js";
import { expectIntBounds, type IntSetting } from "../../../test/support/int_settings.js";

const INT_SETTINGS: ReadonlyArray<IntSetting<keyof GatewayConfig>> = [
  ["LIVECOUNT_PORT", "port", 8080, 0, 65535],
  ["LIVECOUNT_LISTEN_SOCKETS", "listenSockets", 32, 1, 64],
  ["LIVECOUNT_IDLE_TIMEOUT_S", "idleTimeoutS", 16, 8, 960],
  ["LIVECOUNT_PUBLISHER_RATE", "publisherRatePerS", 1000, 1, undefined],
  ["LIVECOUNT_PUBLISHER_BURST", "publisherBurst", 2000, 1, undefined],
  ["LIVECOUNT_MAX_PAGES_PER_SOCKET", "maxPagesPerSocket", 64, 1, 10000],
  ["LIVECOUNT_SOCKET_RATE", "socketRatePerS", 20, 1, undefined],
  ["LIVECOUNT_SOCKET_BURST", "socketBurst", 100, 1, undefined],
  ["LIVECOUNT_SOCKET_MAX_REFUSED", "socketMaxRefused", 100, 1, undefined],
  ["LIVECOUNT_MAX_BACKPRESSURE_BYTES", "maxBackpressureBytes", 65536, 1024, undefined],
  ["LIVECOUNT_PAGE_FRAME_RATE", "pageFrameRate", 20_000, 1, undefined],
  ["LIVECOUNT_PRESENCE_BATCH_MS", "presenceBatchMs", 5, 0, 1000],
  ["LIVECOUNT_MAX_HEADER_BYTES", "maxHeaderBytes", 8192, 4096, 65536],
];

describe("gateway - config", () => {
  test.each(INT_SETTINGS)("%s: its default, its bounds taken, one past each refused", (...setting) =>
    expectIntBounds(readGatewayConfig, setting),
  );

  test("LIVECOUNT_PUBLISHER_KEYS: keys of 8 to 256 printable ASCII characters, comma separated; none by default", () => {
    expect(readGatewayConfig({}).publisherKeys).toEqual([]);
    const keys = ["k".repeat(8), "k".repeat(256), "!~#$%&'*"];
    expect(readGatewayConfig({ LIVECOUNT_PUBLISHER_KEYS: keys.join(", ") }).publisherKeys).toEqual(keys);
    for (const bad of ["k".repeat(7), "k".repeat(257), "key with space", "ключ-ключ"])
      expect(() => readGatewayConfig({ LIVECOUNT_PUBLISHER_KEYS: `good-key-1,${bad}` }), bad).toThrow(
        "LIVECOUNT_PUBLISHER_KEYS: each key must be 8..256 printable ASCII characters",
      );
  });
});
