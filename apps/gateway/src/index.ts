export { Gateway, type GatewayOptions } from "./gateway.js";
export { readGatewayConfig, type GatewayConfig } from "./gateway_config.js";
