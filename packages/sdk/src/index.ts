export { LivecountClient } from "./client.js";
export type { ChangeOptions, ListOptions, LivecountClientOptions, ReadOptions } from "./client_options.js";
export { DEFAULT_RETRY, reconnectDelayMs, type RetryOptions } from "./backoff.js";
export { MAX_CHANGE, QUEUE_DEFAULTS, type QueueOptions } from "./change_queue.js";
export {
  AuthError,
  ClientClosedError,
  IdempotencyConflictError,
  InvalidRequestError,
  LivecountError,
  NetworkError,
  PartialFailureError,
  QueueFullError,
  RateLimitedError,
  SERVER_ERROR_CODES,
  UnavailableError,
  type ChangeItem,
  type ClientErrorCode,
  type FailedItem,
  type LivecountErrorCode,
  type ServerErrorCode,
} from "./errors.js";
export type { EventSourceConstructor, EventSourceLike } from "./event_streams.js";
export { isCounterName, isPageId, newIdempotencyKey } from "./ids.js";
export { signJoinToken, type JoinTokenOptions } from "./join_token.js";
export {
  RECONNECT_DEFAULTS,
  type CountListener,
  type ReconnectOptions,
  type SubscribeOptions,
  type WebSocketConstructor,
  type WebSocketLike,
} from "./subscriptions.js";
export type { FetchFn, RetryListener } from "./transport.js";
export type {
  CounterValue,
  CountUpdate,
  IncrementItem,
  PageCounters,
  PageListing,
  RawEntry,
  RawPage,
  ResetValue,
  PageStats,
  WindowValue,
} from "./types.js";
