/**
 * The internal codec (msgpack between gateways and counter nodes, and between DCs): every message
 * type round-trips, page updates are written as msgpackr would write them, record keys that are
 * Object.prototype members stay own keys, and each message decodes in its category only. What it
 * refuses is in internal_codec_malformed.test.ts.
 */
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
