export { CounterNode, type CounterNodeOptions } from "./counter_node.js";
export {
  DEFAULT_VISITOR_KEY,
  DEFAULT_VISITOR_KEY_WARNING,
  MEMORY_STORE_WARNING,
  readCounterConfig,
  type CounterConfig,
} from "./counter_config.js";
export { PageActor } from "./page_actor.js";
export { PagePresence } from "./page_presence.js";
export { startOpsServer } from "./ops_server.js";
export type { WebhookBody } from "./webhook_event.js";
