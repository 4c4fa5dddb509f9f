/**
 * What the internal codec refuses as bad_frame: every missing or malformed field of every message
 * type (each field's invalid values listed below), values that are not maps with a known type, and
 * bytes that are not msgpack.
 */
import { pack } from "msgpackr";
import { describe, expect, it } from "vitest";
import {
  VIEWERS_COUNTER,
  decodeMessage,
  encodeMessage,
  isNodeRequest,
  type InternalMessage,
} from "../src/index.js";
import { MESSAGES } from "./internal_messages.js";
import { protocolErrorOf } from "./protocol_error_of.js";

/** Values that are invalid wherever a field of this name appears. */
const INVALID_FIELD_VALUES: Readonly<Record<string, readonly unknown[]>> = {
  type: [1, null, "", "nope", "constructor", "__proto__", "PRESENCE"],
  gateway: [undefined, "", 1, null, "a b", "x".repeat(129), ["gw"]],
  node: [undefined, "", 1, "n\x7f"],
  incarnation: [undefined, "", 1, "i\x7f"],
  seq: [undefined, -1, 1.5, "1"],
  // Of a presence_sync_part of 3 parts: from 0, and before the last.
  part: [undefined, -1, 1.5, "1", 3],
  // Optional (absent is valid): how often the gateway's bus came back.
  reconnects: [-1, 1.5, "1", null],
  parts: [undefined, 0, 1, 1.5, "3", 257],
  from: [undefined, "", 1, "f\x7f"],
  to: [undefined, "", 1, "t o"],
  bootstrap: [null, 3, "yes", [-1], [1.5], ["1"], [65_536], Array.from({ length: 65_537 }, () => 0)],
  pull: [null, 3, [-1], [1.5], ["1"], [4096], Array.from({ length: 4097 }, () => 0)],
  done: [null, 0, "true"],
  dc: [undefined, "", 1, "d c"],
  partition: [undefined, -1, 1.5, "1", null, 2 ** 53, Number.NaN],
  hop: [-1, 1.5, "1", null, true],
  ops: [
    undefined,
    {},
    "x",
    null,
    [null],
    [{ page: "", viewer: "v:a", present: true }],
    [{ page: "p", viewer: "", present: true }],
    [{ page: "p", viewer: "v:a", present: 1 }],
    [{ page: "p", viewer: "v:a" }],
    [{ page: "p", viewer: "v:a", present: false, drop: 1 }],
    [{ page: "p", viewer: "v:a", present: true, sockets: 0 }],
    [{ page: "p", viewer: "v:a", present: true, sockets: 1.5 }],
    [{ page: "p", viewer: "v:a", present: true, sockets: "2" }],
    [{ page: "p", viewer: "v:a", present: true, sockets: 2 ** 20 + 1 }],
    [{ page: "p", viewer: "v:a", present: true, active: "yes" }],
    [["p", "v:a", true]],
  ],
  seconds: [undefined, 0, -1, 1.5, "60", 86_401],
  peak1h: [undefined, -1, 1.5, "1"],
  peak24h: [undefined, -1, 1.5, "1"],
  unique24h: [undefined, -1, 1.5, "1"],
  // Optional (absent is valid): socket counts per viewer of a page, each positive.
  sockets: [
    null,
    [],
    { home: 2 },
    { home: [0] },
    { home: [-1] },
    { home: [1.5] },
    { home: [2 ** 20 + 1] },
    { "bad page": [1] },
  ],
  // Optional: viewers of a page none of whose sockets is active.
  passive: [null, [], { home: "v:a" }, { home: [""] }, { home: [1] }, { "": ["v:a"] }],
  pages: [
    undefined,
    [],
    { home: "v:a" },
    { home: [1] },
    { home: [""] },
    { "": ["v:a"] },
    { "bad page": [] },
    { home: null },
  ],
  page: [undefined, "", "a b", 1, null, "é", "p".repeat(129)],
  // Increments (and their replies) are for publisher counters, never the presence counter.
  counter: [undefined, "", VIEWERS_COUNTER, "li kes", 1, "c".repeat(65)],
  delta: [undefined, 1.5, "1", null, 2 ** 53, -(2 ** 53), Number.NaN, Number.POSITIVE_INFINITY],
  key: [undefined, "", 1, "k".repeat(129), "k y"],
  ts: [undefined, -1, 1.5, "now", null, 2 ** 53],
  value: [undefined, 1.5, "1", null, 2 ** 53],
  updatedAt: [undefined, -1, 0.5, null],
  duplicate: [undefined, 0, "false", null],
  code: [undefined, "nope", "", 1, "constructor"],
  message: [undefined, 1, null],
  leaseMs: [undefined, 0, -1, 1.5, "1"],
  purgeBefore: [null, -1, 1.5, "1"],
  epoch: [undefined, null, -1, 1.5, "1"],
  acksKeys: [null, 1, "true"],
  seqs: [undefined, null, [], [0], [-1], [1.5], ["1"], Array.from({ length: 1001 }, () => 1)],
  startedAt: [null, -1, 1.5, "1"],
  olderThanMs: [undefined, -1, 1.5, "1", null],
  before: [undefined, -1, 1.5, "1"],
  kept: [undefined, -1, 1.5, "1"],
  failed: [undefined, -1, 1.5, "1"],
  waiting: [undefined, -1, 1.5, "1"],
  floor: [null, -1, 1.5, "1"],
  // One digest per partition of `digests` (two in the message listed), each a digest.
  tombs: [null, "0123456789abcdef", ["0123456789abcdef"], ["0123456789ABCDEF", "0000000000000000"]],
  state: [undefined, "UP", "", 1, "down-ish"],
};

/** Counters of a page state: counter -> data center -> entry. */
const INVALID_STATE_COUNTERS: readonly unknown[] = [
  undefined,
  [],
  { likes: { p: 1, n: 0 } },
  { "li kes": { dc1: { p: 1, n: 0 } } },
  { likes: { "": { p: 1, n: 0 } } },
  { likes: { dc1: { p: -1, n: 0 } } },
  { likes: { dc1: { p: 1.5, n: 0 } } },
  { likes: { dc1: { p: 1 } } },
  { likes: { dc1: { p: 1, n: "0" } } },
  { likes: { dc1: [1, 0] } },
  { likes: { dc1: { p: 2 ** 53, n: 0 } } },
];

/** Counters of an update: counter -> entry. */
const INVALID_UPDATE_COUNTERS: readonly unknown[] = [
  undefined,
  [],
  { likes: { p: -1, n: 0 } },
  { likes: { p: 2 ** 53, n: 0 } },
  { likes: { p: 0, n: -0.5 } },
  { "li kes": { p: 1, n: 0 } },
  { likes: { dc1: { p: 1, n: 0 } } },
  { likes: null },
];

/** Digests of a summary (pairs) or of buckets (a list). */
const INVALID_DIGESTS: readonly unknown[] = [
  undefined,
  null,
  "0123456789abcdef",
  [["0123456789abcdef"]],
  [1],
];
const INVALID_SUMMARY_DIGESTS: readonly unknown[] = [
  ...INVALID_DIGESTS,
  [[0, "0123456789ABCDEF"]],
  [[0, "0123"]],
  [[-1, "0123456789abcdef"]],
  [[65_536, "0123456789abcdef"]],
  [[0, "0123456789abcdef", 1]],
];
const INVALID_BUCKET_DIGESTS: readonly unknown[] = [
  ...INVALID_DIGESTS,
  ["0123456789abcdeg"],
  Array.from({ length: 4097 }, () => "0000000000000000"),
];
/** Pages of a presence_pages batch: [page id, [viewer key, hold code, ...]] each. */
const INVALID_PRESENCE_PAGES: readonly unknown[] = [
  undefined,
  null,
  {},
  { home: ["v:a", 3] },
  [null],
  [["home"]],
  [["home", ["v:a", 3], 1]],
  [["", ["v:a", 3]]],
  [["bad page", []]],
  [["home", "v:a"]],
  [["home", { "v:a": 3 }]],
  [["home", []]],
  [["home", ["v:a"]]],
  [["home", ["v:a", 3, "v:b"]]],
  // 2^20 + 1 sockets, one more than MAX_VIEWER_SOCKETS.
  [["home", ["v:a", 2 ** 21 + 2]]],
  [["home", ["v:a", 1]]],
  [["home", ["v:a", -2]]],
  [["home", ["v:a", 2.5]]],
  [["home", ["v:a", "3"]]],
  [["home", ["v:a", true]]],
  [["home", ["v:a", 2 ** 53]]],
  [["home", ["", 3]]],
  [["home", [3, "v:a"]]],
];
/** Pages of anti-entropy entries: page -> counter -> data center -> entry. */
const INVALID_AE_PAGES: readonly unknown[] = [
  undefined,
  [],
  { "bad page": {} },
  { home: { "li kes": { us: { p: 1, n: 0 } } } },
  { home: { likes: { us: { p: -1, n: 0 } } } },
  { home: { likes: { p: 1, n: 0 } } },
  { home: null },
  Object.fromEntries(Array.from({ length: 10_001 }, (_, i) => [`p${i}`, {}])),
];

function invalidValues(msg: InternalMessage, field: string): readonly unknown[] {
  if (field === "digests")
    return msg.type === "ae_summary" ? INVALID_SUMMARY_DIGESTS : INVALID_BUCKET_DIGESTS;
  if (field === "pages" && (msg.type === "ae_entries" || msg.type === "updates")) return INVALID_AE_PAGES;
  if (field === "pages" && msg.type === "presence_pages") return INVALID_PRESENCE_PAGES;
  // Optional: absent is valid. A sync's is per page, as `passive` is.
  if (field === "unvisited" && msg.type === "presence_sync") return INVALID_FIELD_VALUES.passive!;
  if (field === "unvisited")
    return [
      null,
      {},
      [["home"]],
      [["bad page", ["v:a"]]],
      [["home", "v:a"]],
      [["home", [""]]],
      [["home", [3]]],
    ];
  if (field === "pages" && msg.type === "purged") return [undefined, -1, 1.5, "1", []];
  if (field === "keys" && msg.type === "keys")
    return [undefined, null, [], {}, [5], [{ page: "p", key: "k", counter: "likes", delta: 1 }]];
  if (field === "bootstrap" && msg.type === "ae_buckets") return [null, 1, "true", [3]];
  if (field === "senderLearning") return [null, 1, "true", [3]];
  if (field === "counters")
    return msg.type === "page_state" || msg.type === "page_stats"
      ? INVALID_STATE_COUNTERS
      : INVALID_UPDATE_COUNTERS;
  // A gateway heartbeat's node is optional (older gateways leave it out); when present, an id.
  if (field === "node" && msg.type === "gateway") return INVALID_FIELD_VALUES.node!.slice(1);
  // A gateway heartbeat cannot be "leaving" and a node heartbeat cannot be "down".
  if (field === "state") return [...INVALID_FIELD_VALUES.state!, msg.type === "gateway" ? "leaving" : "down"];
  const values = INVALID_FIELD_VALUES[field];
  if (values === undefined) throw new Error(`no invalid values listed for field ${field}`);
  return values;
}

/** Replaces (or, for undefined, removes) one field of a message, bypassing the types. */
function withField(msg: InternalMessage, field: string, value: unknown): unknown {
  const copy: Record<string, unknown> = { ...msg };
  if (value === undefined) delete copy[field];
  else copy[field] = value;
  return copy;
}

describe("internal codec", () => {
  it("internal - rejects every missing or malformed field as bad_frame", () => {
    let cases = 0;
    for (const msg of MESSAGES) {
      for (const field of [...Object.keys(msg), ...(isNodeRequest(msg) ? ["hop"] : [])]) {
        for (const value of invalidValues(msg, field)) {
          if (field === "hop" && value === undefined) continue;
          const bytes = Uint8Array.from(pack(withField(msg, field, value)));
          const err = protocolErrorOf(() => decodeMessage(bytes), "bad_frame");
          expect(err.message.length).toBeGreaterThan(0);
          cases++;
        }
      }
    }
    expect(cases).toBeGreaterThan(300);
  });

  it("internal - rejects messages that are not maps with a known type", () => {
    for (const value of [
      null,
      1,
      "ack",
      true,
      [],
      [{ type: "ack" }],
      {},
      { type: 1 },
      { type: "nope" },
      { type: "count" },
    ]) {
      protocolErrorOf(() => decodeMessage(Uint8Array.from(pack(value))), "bad_frame");
    }
  });

  it("internal - rejects malformed msgpack as bad_frame, keeping the decoder's error as cause", () => {
    const valid = encodeMessage(MESSAGES[0]!);
    for (const bytes of [
      new Uint8Array(0),
      valid.subarray(0, valid.length - 1),
      Uint8Array.of(...valid, 0x01),
      Uint8Array.of(0xc1),
      Uint8Array.from(pack({ type: "snapshot", page: "home", at: new Date(0) })),
      Uint8Array.from(pack({ type: "snapshot", page: Buffer.from("home") })),
      Uint8Array.of(0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0),
      Uint8Array.of(...new Array<number>(100_000).fill(0x91), 0xc0),
    ]) {
      protocolErrorOf(() => decodeMessage(bytes), "bad_frame");
    }
  });
});
