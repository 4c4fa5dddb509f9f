import { pack } from "msgpackr";
import { describe, expect, it } from "vitest";
import {
  VIEWERS_COUNTER,
  decodeBroadcast,
  decodeMessage,
  decodeNodeReply,
  decodeNodeRequest,
  encodeMessage,
  encodePageUpdate,
  isBroadcast,
  isDigest,
  isNodeReply,
  isNodeRequest,
  pageRecordFrom,
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
  it("internal - round-trips every message type", () => {
    for (const msg of MESSAGES) {
      const decoded = decodeMessage(encodeMessage(msg));
      expect(decoded).toEqual(msg);
      expect(JSON.stringify(decoded)).toBe(JSON.stringify(msg));
    }
  });

  it("internal - a page update encoded from a Map is the bytes of the same update from a record", () => {
    const counters = {
      [VIEWERS_COUNTER]: { p: 3, n: 1 },
      "@u:20415:17": { p: 2, n: 0 },
      likes: { p: 1, n: 0 },
    };
    const update = { type: "update", page: "home", dc: "dc1" } as const;
    const ts = 1_700_000_000_000;
    const fromMap = encodePageUpdate({ ...update, counters: new Map(Object.entries(counters)), ts });
    // The fields in the order an owner writes them (durable_writer.ts), as msgpackr packs a record.
    expect(Buffer.from(fromMap)).toEqual(Buffer.from(encodeMessage({ ...update, counters, ts })));
    expect(decodeMessage(fromMap)).toEqual({ ...update, counters, ts });
    // A counter named "__proto__" stays a counter through the Map.
    const proto = decodeMessage(
      encodePageUpdate({ ...update, counters: new Map([["__proto__", { p: 1, n: 0 }]]), ts }),
    );
    expect(proto.type === "update" && Object.keys(proto.counters)).toEqual(["__proto__"]);
  });

  it("internal - page updates are msgpackr's bytes for thousands of shapes (number boundaries, non-ASCII, long names), each intact after the rest", () => {
    const numbers = [0, 1, 127, 128, 255, 256, 65_535, 65_536, 2 ** 32 - 1, 2 ** 32, Number.MAX_SAFE_INTEGER];
    // Short and long names, non-ASCII ones whose UTF-8 is longer than their UTF-16 length (each
    // string header's boundary is msgpack_writer.test.ts's; here the names get suffixes).
    const names = [
      ...[0, 1, 31, 32, 255, 256].map((n) => "c".repeat(n)),
      "é",
      "€".repeat(11),
      "😀".repeat(8),
      `a${"é".repeat(200)}`,
      `${"x".repeat(30)}é`,
    ];
    const huge = ["p".repeat(65_535), "p".repeat(65_536), `${"p".repeat(65_534)}é`];
    const updates = [];
    for (let i = 0; i < 3000; i++) {
      const counters = new Map<string, { p: number; n: number }>();
      const size = [0, 1, 15, 16, 17][i % 5]!;
      for (let k = 0; k < size; k++)
        counters.set(`${names[(i + k) % names.length]}#${k}`, {
          p: numbers[(i + k) % numbers.length]!,
          n: numbers[(i * 7 + k) % numbers.length]!,
        });
      const page = i < huge.length ? huge[i]! : `${names[i % names.length]}-${i}-ü`;
      const dc = `dc-${i % 3}`;
      const ts = numbers[i % numbers.length]!;
      const update = { type: "update", page, dc, counters, ts } as const;
      updates.push({ update, bytes: encodePageUpdate(update) });
    }
    // Compared once all are written: none was overwritten by a later one.
    const differ = updates.filter(({ update, bytes }) => {
      const record = { ...update, counters: Object.fromEntries(update.counters) };
      return Buffer.compare(Buffer.from(bytes), Buffer.from(encodeMessage(record))) !== 0;
    });
    expect(differ.map(({ update }) => update.page.slice(0, 40))).toEqual([]);
  });

  it("internal - a page update is sized for the widest names and numbers: one larger than a buffer is written whole", () => {
    // Three UTF-8 bytes a unit leave a string's bound two bytes to spare; 2^40 takes nine bytes.
    const wide = (n: number): string => "€".repeat(n);
    const entry = { p: 2 ** 40, n: 2 ** 40 };
    for (const size of [0, 2, 40]) {
      const counters = new Map(Array.from({ length: size }, (_, k) => [wide(k + 1), entry]));
      const update = { type: "update", page: wide(6000), dc: wide(1), counters, ts: 2 ** 40 } as const;
      const record = { ...update, counters: Object.fromEntries(counters) };
      expect(
        Buffer.compare(Buffer.from(encodePageUpdate(update)), Buffer.from(encodeMessage(record))),
        `${size} counters`,
      ).toBe(0);
    }
  });

  it("internal - keeps record keys that are Object.prototype members as own properties", () => {
    const sync = decodeMessage(encodeMessage(MESSAGES[2]!));
    expect(sync.type === "presence_sync" && Object.keys(sync.pages)).toEqual([
      "home",
      "__proto__",
      "constructor",
    ]);
    // Keyed by page id: a table without prototype (pageRecordOf), which "__proto__" cannot give one.
    expect(sync.type === "presence_sync" && Object.getPrototypeOf(sync.pages)).toBe(null);
    expect(sync.type === "presence_sync" && sync.pages["__proto__"]).toEqual(["v:b"]);
    const entries = decodeMessage(
      encodeMessage({
        type: "ae_entries",
        from: "eu",
        to: "us",
        partition: 0,
        pages: Object.fromEntries([["__proto__", { likes: { eu: { p: 1, n: 0 } } }]]),
      }),
    );
    expect(entries.type === "ae_entries" && Object.getPrototypeOf(entries.pages)).toBe(null);
    expect(entries.type === "ae_entries" && Object.entries(entries.pages)).toEqual([
      ["__proto__", { likes: { eu: { p: 1, n: 0 } } }],
    ]);
    const state = decodeMessage(encodeMessage(MESSAGES.find((m) => m.type === "page_state")!));
    expect(state.type === "page_state" && Object.keys(state.counters)).toEqual([
      VIEWERS_COUNTER,
      "likes",
      "__proto__",
    ]);
  });

  it("internal - a map keyed by page id built without prototype encodes as Object.fromEntries's, __proto__ a page", () => {
    const pages: Array<[string, string[]]> = [
      ["home", ["v:a"]],
      ["__proto__", ["v:b"]],
      ["constructor", []],
    ];
    const built = pageRecordFrom(pages);
    expect(Object.getPrototypeOf(built)).toBe(null);
    expect(Object.entries(built)).toEqual(pages);
    const sync = { type: "presence_sync", gateway: "g", partition: 1 } as const;
    expect(encodeMessage({ ...sync, pages: built })).toEqual(
      encodeMessage({ ...sync, pages: Object.fromEntries(pages) }),
    );
  });

  it("internal - leaves undefined optional fields out and drops unknown fields", () => {
    const decoded = decodeMessage(encodeMessage({ type: "snapshot", page: "home", hop: undefined }));
    expect(decoded).toEqual({ type: "snapshot", page: "home" });
    expect(Object.keys(decoded)).toEqual(["type", "page"]);
    const extra = decodeMessage(Uint8Array.from(pack({ type: "ack", future: { field: [1, 2] } })));
    expect(extra).toEqual({ type: "ack" });
    expect(Object.keys(extra)).toEqual(["type"]);
    const op = decodeMessage(
      Uint8Array.from(
        pack({
          type: "presence",
          gateway: "g",
          partition: 1,
          ops: [{ page: "p", viewer: "v:1", present: true, x: 1 }],
        }),
      ),
    );
    expect(op.type === "presence" && Object.keys(op.ops[0]!)).toEqual(["page", "viewer", "present"]);
  });

  it("internal - decodes by category and refuses a valid message of another category", () => {
    for (const msg of MESSAGES) {
      const bytes = encodeMessage(msg);
      const decoded = decodeMessage(bytes);
      const categories = [isNodeRequest(decoded), isNodeReply(decoded), isBroadcast(decoded)];
      expect(categories.filter(Boolean)).toHaveLength(1);
      const decoders = [decodeNodeRequest, decodeNodeReply, decodeBroadcast];
      decoders.forEach((decode, i) => {
        if (categories[i]) expect(decode(bytes)).toEqual(msg);
        else protocolErrorOf(() => decode(bytes), "unknown_type");
      });
    }
  });

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

  it("internal - decodes large batches", () => {
    const ops = Array.from({ length: 20_000 }, (_, i) => ({
      page: `page-${i % 100}`,
      viewer: `v:${i}`,
      present: i % 3 !== 0,
    }));
    const batch: InternalMessage = { type: "presence", gateway: "gw", partition: 3, ops };
    expect(decodeMessage(encodeMessage(batch))).toEqual(batch);
  });

  it("internal - keeps earlier encodings intact after later ones", () => {
    const first = encodeMessage(MESSAGES[0]!);
    const copy = Uint8Array.from(first);
    for (let i = 0; i < 2000; i++) encodeMessage(MESSAGES[8]!);
    expect(Uint8Array.from(first)).toEqual(copy);
    expect(decodeMessage(first)).toEqual(MESSAGES[0]);
  });

  it("internal - a digest is exactly 16 lowercase hex digits", () => {
    expect(isDigest("0123456789abcdef")).toBe(true);
    for (const bad of ["0123456789abcde", "x0123456789abcdef", "0123456789abcdefx", "0123456789ABCDEF", 16]) {
      expect(isDigest(bad)).toBe(false);
    }
  });
});
