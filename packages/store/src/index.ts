export {
  StoreConnectError,
  StoreError,
  InvalidStoreInputError,
  StaleFenceError,
  PartialWriteError,
  OWN_VALUE,
  type Store,
  type AcquireOptions,
  type BusNote,
  type Fence,
  type Lease,
  type PageRecord,
  type PageList,
  type CounterRef,
  type EntryRef,
  type EntryWrite,
  type FencedWrites,
  type CounterChange,
  type IncrementOp,
  type IncrementOutcome,
  type KeyRestore,
  type PurgeResult,
} from "./store.js";
export { MemoryStore, type MemoryStoreOptions } from "./memory_store.js";

export { RedisStore, type RedisStoreOptions } from "./redis_store.js";
export {
  DIGEST_BUCKETS,
  ZERO_DIGEST,
  bucketOf,
  entryHash,
  isPresenceCounter,
  pageDigest,
  purgeableAt,
  xorDigest,
} from "./digest.js";
