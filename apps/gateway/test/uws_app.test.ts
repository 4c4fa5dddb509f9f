/**
 * uWebSockets.js takes LIVECOUNT_MAX_HEADER_BYTES once per process, when it loads (uws.ts): a
 * gateway made later in the same process with another value would silently not have it.
 */
import { ConfigError } from "@livecount/runtime";
import { describe, expect, test } from "vitest";
import { readGatewayConfig } from "../src/gateway_config.js";
import { createApp } from "../src/uws_app.js";
import { UWS_HEADER_BYTES } from "../src/uws.js";

describe("gateway - LIVECOUNT_MAX_HEADER_BYTES in one process", () => {
  test("a gateway's app with the value uWS loaded with is made; with another, a ConfigError names the variable and both values", () => {
    const loaded = readGatewayConfig({ LIVECOUNT_MAX_HEADER_BYTES: String(UWS_HEADER_BYTES) });
    createApp(loaded).close();
    const other = readGatewayConfig({ LIVECOUNT_MAX_HEADER_BYTES: String(UWS_HEADER_BYTES * 2) });
    expect(() => createApp(other)).toThrow(ConfigError);
    expect(() => createApp(other)).toThrow(
      `LIVECOUNT_MAX_HEADER_BYTES is ${UWS_HEADER_BYTES * 2} for this gateway, but this process loaded uWebSockets.js with ${UWS_HEADER_BYTES}`,
    );
  });
});
