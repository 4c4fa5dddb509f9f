export { Backoff, fullJitterMs } from "./backoff.js";
export { BearerKeys, bearerOf } from "./bearer_keys.js";
export { sleep, systemClock, yieldTurn, type Clock, type TimerHandle } from "./clock.js";
export { Coalescer } from "./coalescer.js";
export { ConcurrencyLimit } from "./concurrency_limit.js";
export {
  ConfigError,
  readChoice,
  readFlag,
  readInt,
  readList,
  readOptionalString,
  readString,
  readToken,
  type Env,
} from "./config.js";
export { createLogger, flushLogs, readLogLevel, silentLogger, type Logger } from "./logger.js";
export { LOG_REPEAT_MS, LogThrottle } from "./log_throttle.js";
export { exitWithFailure, stopOnSignals, stopWithFailure } from "./shutdown.js";
export {
  FULL_BUCKET_AT,
  fullBucket,
  takeTokens,
  takeTokensAt,
  type BucketFullAt,
  type BucketLimits,
  type BucketState,
} from "./token_bucket.js";
