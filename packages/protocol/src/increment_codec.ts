/**
 * Publisher increments in batches between gateways and owners, and the decoders of increments (the
 * single one is in internal.ts): one increment, a batch of them, and their answers. Part of the bus
 * codec (internal_codec.ts).
 */
import { isErrorCode } from "./errors.js";
import { isCounterName, isIdempotencyKey, isPageId } from "./ids.js";
import type {
  ErrorReply,
  IncrementReply,
  IncrementRequest,
  InternalMessage,
  NodeRequest,
} from "./internal.js";
import {
  batchOf,
  field,
  fieldsOf,
  isBoolean,
  isNatural,
  isSafeInteger,
  isString,
  malformed,
  type Fields,
} from "./internal_fields.js";
import { MsgpackWriter, VALUE_BOUND, fixstrs, stringBound } from "./msgpack_writer.js";

const writer = new MsgpackWriter();
/** A map of two, `type` and its value and the key `replies`. */
const HEAD = Uint8Array.from([0x82, ...fixstrs("type", "increments_done", "replies")]);
/** A map of six, `type` and its value and the key `page`; then counter, value, updatedAt, duplicate. */
const INCREMENTED = Uint8Array.from([0x86, ...fixstrs("type", "incremented", "page")]);
const COUNTER_KEY = fixstrs("counter");
const VALUE_KEY = fixstrs("value");
const UPDATED_AT_KEY = fixstrs("updatedAt");
const DUPLICATE_KEY = fixstrs("duplicate");
const ERROR = fixstrs("type", "error", "code");
const MESSAGE_KEY = fixstrs("message");

/**
 * An `increments_done` reply, written by hand (msgpack_writer.ts): the bytes msgpackr writes for it
 * with its fields in the order the owner builds them, so every release decodes it alike. An owner
 * answers every batch of a hot page's increments with one, and msgpackr's generic steps per object
 * and key were 7.5% of the owner's busy time in the hot-page benchmark (docs/benchmarks.md).
 */
export function encodeIncrementsDone(reply: IncrementsReply): Uint8Array {
  let bound = 32 + VALUE_BOUND;
  for (const r of reply.replies) {
    bound +=
      r.type === "incremented"
        ? 64 + stringBound(r.page) + stringBound(r.counter) + 3 * VALUE_BOUND
        : 32 + stringBound(r.code) + (r.message === undefined ? 0 : stringBound(r.message));
  }
  writer.begin(bound);
  writer.raw(HEAD);
  writer.array(reply.replies.length);
  for (const r of reply.replies) {
    if (r.type === "incremented") {
      writer.raw(INCREMENTED);
      writer.string(r.page);
      writer.raw(COUNTER_KEY);
      writer.string(r.counter);
      writer.raw(VALUE_KEY);
      writer.integer(r.value);
      writer.raw(UPDATED_AT_KEY);
      writer.natural(r.updatedAt);
      writer.raw(DUPLICATE_KEY);
      writer.boolean(r.duplicate);
    } else {
      // msgpackr leaves an undefined message out (internal_codec.ts, skipValues).
      writer.map(r.message === undefined ? 2 : 3);
      writer.raw(ERROR);
      writer.string(r.code);
      if (r.message !== undefined) {
        writer.raw(MESSAGE_KEY);
        writer.string(r.message);
      }
    }
  }
  return writer.end();
}

/** The most increments one `increments` request may carry. */
export const MAX_INCREMENT_BATCH = 1000;

/**
 * Gateway -> owner: a turn's publisher increments for pages this node owns, 1..MAX_INCREMENT_BATCH.
 * Each item is handled (forwarded when another node owns its page) and answered on its own, in
 * order (`IncrementsReply`): one item's error is that item's only.
 */
export interface IncrementsRequest {
  readonly type: "increments";
  readonly items: readonly IncrementRequest[];
}

/** The answers to an `increments` request: one per item, in the items' order. */
export interface IncrementsReply {
  readonly type: "increments_done";
  readonly replies: ReadonlyArray<IncrementReply | ErrorReply>;
}

function incrementFields(m: Fields): IncrementRequest {
  return {
    type: "increment",
    page: field(m, "page", isPageId),
    counter: field(m, "counter", isCounterName),
    delta: field(m, "delta", isSafeInteger),
    key: field(m, "key", isIdempotencyKey),
  };
}

function incrementedOf(m: Fields): IncrementReply {
  return {
    type: "incremented",
    page: field(m, "page", isPageId),
    counter: field(m, "counter", isCounterName),
    value: field(m, "value", isSafeInteger),
    updatedAt: field(m, "updatedAt", isNatural),
    duplicate: field(m, "duplicate", isBoolean),
  };
}

export function errorOf(m: Fields): ErrorReply {
  return {
    type: "error",
    code: field(m, "code", isErrorCode),
    message: field(m, "message", isString),
  };
}

/**
 * The decoder of one answer of a batch's reply (`what`: "an increments", ...): the reply `type`,
 * decoded by `decode`, or an error.
 */
export function answerOf<T>(
  type: string,
  decode: (m: Fields) => T,
  what: string,
): (v: unknown) => T | ErrorReply {
  return (v) => {
    const m = fieldsOf(v, "reply");
    const t = m.get("type");
    if (t === type) return decode(m);
    if (t === "error") return errorOf(m);
    return malformed(`${what} reply item is neither ${type} nor error`);
  };
}

/** One answer of an `increments_done` reply: incremented or an error. */
const itemReplyOf = answerOf("incremented", incrementedOf, "an increments");

function incrementOf(v: unknown): IncrementRequest {
  const m = fieldsOf(v, "item");
  if (m.get("type") !== "increment") malformed("an item is not an increment");
  return incrementFields(m);
}

/** The decoders of this file's messages; `withHop` adds a request's forwarding count. */
export function incrementDecoders(
  withHop: (m: Fields, request: NodeRequest) => NodeRequest,
): ReadonlyArray<readonly [string, (m: Fields) => InternalMessage]> {
  return [
    ["increment", (m) => withHop(m, incrementFields(m))],
    [
      "increments",
      (m) =>
        withHop(m, {
          type: "increments",
          items: batchOf(m.get("items"), incrementOf, "items", MAX_INCREMENT_BATCH),
        }),
    ],
    ["incremented", incrementedOf],
    [
      "increments_done",
      (m) => ({
        type: "increments_done",
        replies: batchOf(m.get("replies"), itemReplyOf, "replies", MAX_INCREMENT_BATCH),
      }),
    ],
  ];
}
