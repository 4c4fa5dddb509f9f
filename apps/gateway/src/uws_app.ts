import { ConfigError } from "@livecount/runtime";
import type { TemplatedApp } from "uWebSockets.js";
import type { GatewayConfig } from "./gateway_config.js";
import { GIVEN_UWS_HEADER_BYTES, UWS_HEADER_BYTES, uWS } from "./uws.js";

/**
 * uWS's app: https/wss with LIVECOUNT_TLS_CERT_FILE / LIVECOUNT_TLS_KEY_FILE, plain otherwise. Its
 * request heads are bounded by what uWS took when it loaded (uws.ts): a gateway made in the same
 * process with another LIVECOUNT_MAX_HEADER_BYTES would silently not have it, so it does not start;
 * nor does one started with a UWS_HTTP_MAX_HEADERS_SIZE of its own that differs (uws.ts set it).
 */
export function createApp(config: Pick<GatewayConfig, "tls" | "maxHeaderBytes">): TemplatedApp {
  if (config.maxHeaderBytes !== UWS_HEADER_BYTES) {
    throw new ConfigError(
      `LIVECOUNT_MAX_HEADER_BYTES is ${config.maxHeaderBytes} for this gateway, but this process loaded uWebSockets.js with ${UWS_HEADER_BYTES}: set it in the process's environment before it starts`,
    );
  }
  // Blank is unset, as for every setting; a number is read as uWS reads it (atoi).
  const given = GIVEN_UWS_HEADER_BYTES?.trim();
  if (
    given !== undefined &&
    given !== "" &&
    !(/^\d+$/.test(given) && Number(given) === config.maxHeaderBytes)
  ) {
    throw new ConfigError(
      `UWS_HTTP_MAX_HEADERS_SIZE is "${given}", but the gateway sets uWebSockets.js's limit from LIVECOUNT_MAX_HEADER_BYTES (${config.maxHeaderBytes}): set that instead`,
    );
  }
  const { tls } = config;
  if (tls === undefined) return uWS.App();
  try {
    return uWS.SSLApp({ cert_file_name: tls.certFile, key_file_name: tls.keyFile });
  } catch (err) {
    throw new ConfigError(
      `LIVECOUNT_TLS_CERT_FILE / LIVECOUNT_TLS_KEY_FILE: cannot load ${tls.certFile} and ${tls.keyFile} as a PEM certificate and key`,
      { cause: err },
    );
  }
}
