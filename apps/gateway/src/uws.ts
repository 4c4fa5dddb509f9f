/**
 * uWebSockets.js, loaded once the size of a request's head is known. uWS reads how many bytes a
 * request line and its headers may take (`UWS_HTTP_MAX_HEADERS_SIZE`, 4 KiB by default) from the
 * environment once, when its native module loads, and answers a longer head, WebSocket upgrades
 * included, with `431` and a closed connection. So this module sets it from
 * LIVECOUNT_MAX_HEADER_BYTES before it loads uWS, and every module that uses uWS's values takes
 * them from here; types still come from "uWebSockets.js". A process that embeds the gateway must
 * not load uWS itself before this module: uWS would keep the size it found then, and nothing here
 * can tell.
 */
import { ConfigError } from "@livecount/runtime";
import { readMaxHeaderBytes } from "./gateway_config.js";

/**
 * The head size this process's uWS took. A value readGatewayConfig refuses loads the default here;
 * the gateway's start then fails with readGatewayConfig's error, which names the variable.
 */
export const UWS_HEADER_BYTES = headerBytesOf(process.env);

/** UWS_HTTP_MAX_HEADERS_SIZE as the process was started with it: createApp refuses one that differs. */
export const GIVEN_UWS_HEADER_BYTES = process.env.UWS_HTTP_MAX_HEADERS_SIZE;

function headerBytesOf(env: NodeJS.ProcessEnv): number {
  try {
    return readMaxHeaderBytes(env);
  } catch (err) {
    if (err instanceof ConfigError) return readMaxHeaderBytes({});
    throw err;
  }
}

process.env.UWS_HTTP_MAX_HEADERS_SIZE = String(UWS_HEADER_BYTES);

export const uWS = await import("uWebSockets.js");

// uWS has read it: processes this one starts inherit the environment it was given.
if (GIVEN_UWS_HEADER_BYTES === undefined) delete process.env.UWS_HTTP_MAX_HEADERS_SIZE;
else process.env.UWS_HTTP_MAX_HEADERS_SIZE = GIVEN_UWS_HEADER_BYTES;
