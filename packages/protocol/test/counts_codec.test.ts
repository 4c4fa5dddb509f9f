import { pack, unpack } from "msgpackr";
import { describe, expect, it } from "vitest";
import {
  COUNTS_SUBPROTOCOL,
  answeredSubprotocol,
  decodeServerFrame,
  encodeCountsEntry,
  encodeCountsFrame,
  encodeServerFrame,
  offersCounts,
  spliceCountsFrame,
  type CountFrame,
  type CountsFrame,
  type Encoding,
} from "../src/index.js";
import { protocolErrorOf } from "./protocol_error_of.js";

const ENCODINGS: readonly Encoding[] = ["json", "msgpack"];
const TS = 1_717_171_717_171;

const A: CountFrame = {
  type: "count",
  page: "article-1",
  viewers: 17,
  active: 11,
  connections: 21,
  counters: { likes: 120, claps: 8 },
  ts: TS,
  dcs: ["eu", "us"],
  lag_ms: 40,
};
const B: CountFrame = { type: "count", page: "__proto__", viewers: 0, counters: {}, ts: TS };

/** What a count frame carries for its page in a counts frame: everything but type, page and ts. */
function valueOf(frame: CountFrame): Omit<CountFrame, "type" | "page" | "ts"> {
  const { type: _type, page: _page, ts: _ts, ...value } = frame;
  return value;
}

describe("counts frames", () => {
  it.each(ENCODINGS)(
    "splices entries into a frame that decodes to every page's count value (%s)",
    (encoding) => {
      const data = spliceCountsFrame(
        TS,
        [encodeCountsEntry(A, encoding), encodeCountsEntry(B, encoding)],
        encoding,
      );
      const frame = decodeServerFrame(data, encoding) as CountsFrame;
      expect(frame.type).toBe("counts");
      expect(frame.ts).toBe(TS);
      expect(Object.keys(frame.pages)).toEqual(["article-1", "__proto__"]);
      expect(frame.pages["article-1"]).toEqual(valueOf(A));
      expect(Object.hasOwn(frame.pages, "__proto__")).toBe(true);
      expect(frame.pages["__proto__"]).toEqual(valueOf(B));
    },
  );

  it.each(ENCODINGS)("splices the same bytes as encoding the whole frame (%s)", (encoding) => {
    const whole: CountsFrame = { type: "counts", ts: TS, pages: { "article-1": valueOf(A) } };
    const spliced = spliceCountsFrame(TS, [encodeCountsEntry(A, encoding)], encoding);
    expect(encodeServerFrame(whole, encoding)).toEqual(spliced);
    expect(encodeCountsFrame(whole, encoding)).toEqual(spliced);
  });

  it("writes JSON in the documented shape, page values in the field order of count frames", () => {
    const text = spliceCountsFrame(TS, [encodeCountsEntry(B, "json"), encodeCountsEntry(A, "json")], "json");
    expect(text).toBe(
      `{"type":"counts","ts":${TS},"pages":{"__proto__":{"viewers":0,"counters":{}},` +
        `"article-1":{"viewers":17,"active":11,"connections":21,"counters":{"likes":120,"claps":8},"dcs":["eu","us"],"lag_ms":40}}}`,
    );
  });

  it("writes msgpack that a plain decoder reads as the JSON shape, with 16 pages and more too", () => {
    const frames = Array.from({ length: 20 }, (_, i): CountFrame => ({ ...A, page: `p-${i}`, viewers: i }));
    const bytes = spliceCountsFrame(
      TS,
      frames.map((f) => encodeCountsEntry(f, "msgpack")),
      "msgpack",
    );
    const plain = unpack(bytes) as { type: string; ts: number; pages: Record<string, { viewers: number }> };
    expect(plain.type).toBe("counts");
    expect(plain.ts).toBe(TS);
    expect(Object.keys(plain.pages)).toHaveLength(20);
    expect(plain.pages["p-19"]?.viewers).toBe(19);
  });

  it("writes the pages map with msgpack's smallest header for its size, and no key for an absent field", () => {
    for (const n of [15, 16, 65_536]) {
      const entries = Array.from({ length: n }, (_, i) =>
        encodeCountsEntry({ ...B, page: `p-${i}` }, "msgpack"),
      );
      const bytes = spliceCountsFrame(TS, entries, "msgpack");
      const entryBytes = entries.reduce((sum, e) => sum + e.byteLength, 0);
      const header = n < 16 ? [0x80 | n] : n < 0x10000 ? [0xde, n >> 8, n & 0xff] : [0xdf, 0, 1, 0, 0];
      const at = bytes.byteLength - entryBytes;
      expect(Array.from(bytes.subarray(at - header.length, at)), `${n} pages`).toEqual(header);
      const plain = unpack(bytes) as { pages: Record<string, object> };
      expect(Object.keys(plain.pages)).toHaveLength(n);
      // Absent fields are left out, not written as nil: a page value of B has two keys.
      expect(Object.keys(plain.pages["p-0"]!)).toEqual(["viewers", "counters"]);
    }
  });

  it.each(ENCODINGS)("refuses a counts frame with an invalid page id or value (%s)", (encoding) => {
    const encode = (v: unknown): string | Uint8Array => (encoding === "json" ? JSON.stringify(v) : pack(v));
    const bad = [
      { type: "counts", ts: TS, pages: { "has space": { viewers: 1, counters: {} } } },
      { type: "counts", ts: TS, pages: { a: { viewers: -1, counters: {} } } },
      { type: "counts", ts: TS, pages: { a: { viewers: 1 } } },
      { type: "counts", ts: TS, pages: [] },
      { type: "counts", pages: {} },
    ];
    for (const frame of bad)
      expect(protocolErrorOf(() => decodeServerFrame(encode(frame), encoding))).toBeDefined();
  });
});

describe("the livecount.counts subprotocol", () => {
  it("is offered when the header lists it among others, with or without spaces", () => {
    expect(COUNTS_SUBPROTOCOL).toBe("livecount.counts");
    expect(offersCounts("livecount.counts")).toBe(true);
    expect(offersCounts("chat, livecount.counts")).toBe(true);
    expect(offersCounts("chat,livecount.counts,x")).toBe(true);
  });

  it("is not offered by an empty header, another protocol or a near miss", () => {
    expect(offersCounts("")).toBe(false);
    expect(offersCounts("chat")).toBe(false);
    expect(offersCounts("livecount.counts2")).toBe(false);
    expect(offersCounts("livecount")).toBe(false);
  });

  it("is answered when offered; another offer gets its first value back, no offer none (RFC 6455 4.2.2)", () => {
    expect(answeredSubprotocol("livecount.counts")).toBe(COUNTS_SUBPROTOCOL);
    expect(answeredSubprotocol("chat, livecount.counts")).toBe(COUNTS_SUBPROTOCOL);
    expect(answeredSubprotocol("chat")).toBe("chat");
    expect(answeredSubprotocol("chat, superchat")).toBe("chat");
    expect(answeredSubprotocol(" , chat")).toBe("chat");
    expect(answeredSubprotocol("")).toBe("");
  });
});
