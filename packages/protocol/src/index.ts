export * from "./ids.js";
export * from "./visibility.js";
export * from "./windows.js";
export * from "./series.js";
export * from "./errors.js";
export * from "./frames.js";
export * from "./internal.js";
export {
  MAX_INCREMENT_BATCH,
  encodeIncrementsDone,
  type IncrementsReply,
  type IncrementsRequest,
} from "./increment_codec.js";
export {
  HOLD_DROPPED,
  HOLD_LEFT,
  activeOfCode,
  codeOf,
  holdCode,
  opsOf,
  transitionsOf,
  socketsOfCode,
  type HoldCode,
  type PageTransitions,
  type PageViewers,
  type PresencePages,
} from "./presence_pages.js";
export {
  MAX_ACKED,
  MAX_APPLIED_KEYS,
  type AppliedKey,
  type AppliedKeys,
  type KeysAck,
} from "./applied_keys.js";
export {
  MAX_SNAPSHOT_BATCH,
  MAX_SNAPSHOT_REPLY_BYTES,
  pageStateBytes,
  type SnapshotsReply,
  type SnapshotsRequest,
} from "./snapshot_batch.js";
export * from "./codec.js";
export * from "./counts_codec.js";
export * from "./internal_codec.js";
export { encodePageUpdate } from "./page_update_codec.js";
export { encodeAeEntries, encodePageUpdates } from "./page_records_codec.js";
export { MsgpackWriter, VALUE_BOUND, stringBound } from "./msgpack_writer.js";
export { guardMsgpack, MSGPACK_MAX_DEPTH } from "./msgpack_guard.js";
export * from "./node_replies.js";
export { isDigest } from "./anti_entropy_codec.js";
export { pageRecordFrom } from "./internal_fields.js";
