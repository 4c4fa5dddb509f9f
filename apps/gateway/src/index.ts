export { Gateway, type GatewayOptions } from "./gateway.js";
export { GatewayStoppedError } from "./ring_wait.js";
export { readGatewayConfig, type GatewayConfig } from "./gateway_config.js";
export type { HttpRoute } from "./http_api.js";
export type { RequestInfo } from "./http_io.js";
export { RateLimitedError } from "./rate_limits.js";
export { connectionsOverFileLimit, openFilesLimit } from "./open_files.js";
