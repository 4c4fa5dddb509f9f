export * from "./ids.js";
export * from "./visibility.js";
export * from "./errors.js";
export * from "./frames.js";
export * from "./internal.js";
export * from "./codec.js";
export * from "./internal_codec.js";
export { guardMsgpack, MSGPACK_MAX_DEPTH } from "./msgpack_guard.js";
export * from "./node_replies.js";
