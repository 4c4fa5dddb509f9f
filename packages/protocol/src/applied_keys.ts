/**
 * The idempotency keys of publisher changes a partition's owner answered (applied, or replayed by the
 * store), sent to the other data centers (`lc.keys.<dc>.<partition>`), where one counter node of
 * each stores them beside its own keys: a retry that lands in another DC once these keys reached it
 * is answered as the change it repeats instead of counting again. Older releases neither send nor
 * subscribe. A message names its sending node, that node's process and its number in it; the node
 * that stored its keys answers with a KeysAck (`lc.keysack.<dc>.<node>`), and the sender sends again
 * what is not acknowledged (releases before that neither name nor acknowledge).
 */
import { COUNTER_NAME_MAX_LENGTH, isCounterName, isIdempotencyKey, isInternalId, isPageId } from "./ids.js";
import {
  batchOf,
  field,
  fieldsOf,
  isNatural,
  isPositive,
  isString,
  malformed,
  partitionOf,
  type Fields,
} from "./internal_fields.js";

/** Keys per message: a sender splits a larger round (one message stays well under NATS's 1 MB). */
export const MAX_APPLIED_KEYS = 1000;
/** Longest answer a key keeps (`payload`): `{"value":…,"updatedAt":…}` or a reset's, about 60 characters. */
const MAX_PAYLOAD_LENGTH = 256;
/** Longest fingerprint: `reset:` or `delete:` and a counter name (reset_batch.ts). */
const MAX_FINGERPRINT_LENGTH = "delete:".length + COUNTER_NAME_MAX_LENGTH;

/** One applied change's key: what the store records under it (Store's KeyRestore). */
export interface AppliedKey {
  readonly page: string;
  readonly key: string;
  readonly counter: string;
  readonly delta: number;
  /** The answer a retry gets, as the store keeps it. */
  readonly payload: string;
  /** Set for resets and deletes: a retry matches it whatever the value is then. */
  readonly fingerprint?: string;
}

export interface AppliedKeys {
  readonly type: "keys";
  readonly dc: string;
  readonly partition: number;
  readonly keys: readonly AppliedKey[];
  /** The sending node, a number its process drew at start, and this message's number from 1 (all or none). */
  readonly node?: string;
  readonly epoch?: number;
  readonly seq?: number;
}

/** Keys messages of one sending process stored in `dc`, by number (to `lc.keysack.<its dc>.<its node>`). */
export interface KeysAck {
  readonly type: "keysack";
  readonly dc: string;
  readonly epoch: number;
  readonly seqs: readonly number[];
}

/** Numbers one acknowledgement carries at most (a store call's keys come from fewer messages). */
export const MAX_ACKED = 1000;

const isDelta = (v: unknown): v is number => Number.isSafeInteger(v);
const isPayload = (v: unknown): v is string => isString(v) && v.length <= MAX_PAYLOAD_LENGTH;
const isFingerprint = (v: unknown): v is string =>
  isString(v) && v.length > 0 && v.length <= MAX_FINGERPRINT_LENGTH;

function appliedKeyOf(v: unknown): AppliedKey {
  const m = fieldsOf(v, "applied key");
  const fingerprint = m.get("fingerprint");
  if (fingerprint !== undefined && !isFingerprint(fingerprint)) malformed("field fingerprint is malformed");
  return {
    page: field(m, "page", isPageId),
    key: field(m, "key", isIdempotencyKey),
    counter: field(m, "counter", isCounterName),
    delta: field(m, "delta", isDelta),
    payload: field(m, "payload", isPayload),
    ...(fingerprint !== undefined ? { fingerprint } : {}),
  };
}

/** The sender's node, epoch and number, all three or none. */
function senderOf(m: Fields): Pick<AppliedKeys, "node" | "epoch" | "seq"> {
  if (m.get("node") === undefined && m.get("epoch") === undefined && m.get("seq") === undefined) return {};
  return {
    node: field(m, "node", isInternalId),
    epoch: field(m, "epoch", isNatural),
    seq: field(m, "seq", isPositive),
  };
}

const seqOf = (v: unknown): number => {
  if (!isPositive(v)) malformed("an acknowledged number is not a positive integer");
  return v;
};

export const APPLIED_KEYS_DECODERS: ReadonlyArray<readonly [string, (m: Fields) => AppliedKeys | KeysAck]> = [
  [
    "keys",
    (m) => ({
      type: "keys",
      dc: field(m, "dc", isInternalId),
      partition: partitionOf(m.get("partition")),
      keys: batchOf(m.get("keys"), appliedKeyOf, "keys", MAX_APPLIED_KEYS),
      ...senderOf(m),
    }),
  ],
  [
    "keysack",
    (m) => ({
      type: "keysack",
      dc: field(m, "dc", isInternalId),
      epoch: field(m, "epoch", isNatural),
      seqs: batchOf(m.get("seqs"), seqOf, "seqs", MAX_ACKED),
    }),
  ],
];
