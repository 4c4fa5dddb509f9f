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
