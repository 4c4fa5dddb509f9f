import { ConfigError } from "@livecount/runtime";
import * as uWS from "uWebSockets.js";
import type { GatewayConfig } from "./gateway_config.js";

/** uWS's app: https/wss with LIVECOUNT_TLS_CERT_FILE / LIVECOUNT_TLS_KEY_FILE, plain otherwise. */
export function createApp(tls: GatewayConfig["tls"]): uWS.TemplatedApp {
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
