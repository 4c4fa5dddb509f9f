export {
  BusClosedError,
  BusConnectError,
  BusDisconnectedError,
  BusError,
  BusTimeoutError,
  DEFAULT_REQUEST_TIMEOUT_MS,
  InvalidSubjectError,
  NoRespondersError,
  ResponderError,
  type Bus,
  type BusEvents,
  type BusHandler,
  type BusResponder,
  type BusStatus,
  type RequestOptions,
  type Subscription,
} from "./bus.js";
export { DEFAULT_MAX_PENDING_PER_SUBSCRIPTION, MemoryBus, type MemoryBusOptions } from "./memory_bus.js";
export {
  DEFAULT_DRAIN_TIMEOUT_MS,
  DEFAULT_PING_INTERVAL_MS,
  DEFAULT_RECONNECT_TIME_WAIT_MS,
  NatsBus,
  type BusLogger,
  type NatsBusOptions,
} from "./nats_bus.js";
export { maskedServers, withoutCredentials, type NatsCredentials } from "./nats_servers.js";
export { isSubject, isSubjectPattern } from "./subject_syntax.js";
export {
  antiEntropyPartitionSubject,
  antiEntropySubject,
  assertToken,
  dcUpdatesSubject,
  gatewayIdSubject,
  gatewaySubject,
  gatewaysSubject,
  ID_TOKEN_MAX_LENGTH,
  nodeSubject,
  nodesSubject,
  pageFromSubject,
  pageSubject,
  partitionPagesSubject,
  partitionKeysSubject,
  KEYS_SUBJECTS,
  keysSubjectDc,
  DCS_SUBJECT,
  SUBJECT_ROOT,
} from "./subjects.js";
