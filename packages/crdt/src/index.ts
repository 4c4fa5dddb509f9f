export {
  PNCounter,
  ZERO_ENTRY,
  InvalidEntryError,
  isEntry,
  mergeEntry,
  entryAdvances,
  type Entry,
  type Entries,
  type ReplicaId,
} from "./pn_counter.js";
export { HLL_MAX_RANK, HLL_PRECISION, HLL_REGISTERS, estimateDistinct, registerOf } from "./hyperloglog.js";
