export { CounterNode, type CounterNodeOptions } from "./counter_node.js";
export {
  MEMORY_STORE_WARNING,
  readCounterConfig,
  startWarnings,
  type CounterConfig,
} from "./counter_config.js";
export { PageActor } from "./page_actor.js";
export { PagePresence } from "./page_presence.js";
export { startOpsServer } from "./ops_server.js";
export type { WebhookBody } from "./webhook_event.js";
