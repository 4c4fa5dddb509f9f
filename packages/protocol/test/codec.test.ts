import { pack } from "msgpackr";
import { describe, expect, it } from "vitest";
import {
  CLIENT_FRAME_MAX_BYTES,
  TOKEN_MAX_LENGTH,
  ERROR_CODES,
  ProtocolError,
  decodeClientFrame,
  decodeServerFrame,
  encodeClientFrame,
  encodeCountFrame,
  encodeServerFrame,
  errorFrame,
  errorFrameOf,
  type ClientFrame,
  type CountFrame,
  type Encoding,
  type ServerFrame,
} from "../src/index.js";
import { protocolErrorOf } from "./protocol_error_of.js";

const ENCODINGS: readonly Encoding[] = ["json", "msgpack"];
const TS = 1_717_171_717_171;

const CLIENT_FRAMES: readonly ClientFrame[] = [
  { type: "join", page: "home" },
  { type: "join", page: "/news/2024?id=7", viewer: "v-123" },
  { type: "leave", page: "home" },
  { type: "watch", page: "~" },
  { type: "join", page: "user-7", viewer: "ignored", token: "eyJh.eyJz.c2ln" },
  { type: "watch", page: "user-7", token: "a.b.c" },
  { type: "unwatch", page: "a".repeat(128) },
  { type: "join", page: "home", viewer: "v-9", active: false },
  { type: "join", page: "home", active: true },
  { type: "active", page: "home", active: false },
  { type: "active", page: "home", active: true },
  { type: "active", active: false },
  { type: "ping" },
];

const SERVER_FRAMES: readonly ServerFrame[] = [
  {
    type: "count",
    page: "home",
    viewers: 3,
    counters: { likes: 12, "reactions:heart": 0, debt: -4 },
    ts: TS,
  },
  { type: "count", page: "empty", viewers: 0, counters: {}, ts: 0 },
  { type: "count", page: "attention", viewers: 4, active: 3, connections: 6, counters: {}, ts: TS },
  // Counter names that are also Object.prototype members must survive as plain own properties.
  {
    type: "count",
    page: "proto",
    viewers: 1,
    counters: Object.fromEntries([
      ["__proto__", 1],
      ["constructor", 2],
      ["toString", 3],
    ]),
    ts: TS,
  },
  { type: "error", code: "invalid_page", message: ERROR_CODES.invalid_page.message },
  { type: "error", code: "rate_limited", message: "slow down", page: "home" },
  { type: "pong" },
];

/** Encodes a raw value as a client would, without going through our canonical encoders. */
function raw(value: unknown, encoding: Encoding): string | Uint8Array {
  return encoding === "json" ? JSON.stringify(value) : pack(value);
}

function decodeRaw(value: unknown, encoding: Encoding): ClientFrame {
  return decodeClientFrame(raw(value, encoding), encoding);
}

describe("client frames", () => {
  for (const encoding of ENCODINGS) {
    it(`codec - round-trips every client frame as ${encoding}`, () => {
      for (const frame of CLIENT_FRAMES)
        expect(decodeClientFrame(encodeClientFrame(frame, encoding), encoding)).toEqual(frame);
    });

    it(`codec - returns only the known fields of a ${encoding} frame, as a fresh object`, () => {
      const frame = decodeRaw(
        { extra: { deep: [1, 2] }, type: "join", page: "home", viewer: "v", ts: 5 },
        encoding,
      );
      expect(frame).toEqual({ type: "join", page: "home", viewer: "v" });
      expect(Object.keys(frame)).toEqual(["type", "page", "viewer"]);
      expect(Object.getPrototypeOf(frame)).toBe(Object.prototype);
      expect(Object.keys(decodeRaw({ type: "ping", page: "x", viewer: "y" }, encoding))).toEqual(["type"]);
      expect(Object.keys(decodeRaw({ type: "leave", page: "x", viewer: "y" }, encoding))).toEqual([
        "type",
        "page",
      ]);
    });

    it(`codec - rejects ${encoding} frames that are not objects with a string type as bad_frame`, () => {
      for (const value of [
        null,
        1,
        "join",
        true,
        [],
        [{ type: "ping" }],
        {},
        { type: 1 },
        { type: null },
        { Type: "ping" },
      ]) {
        protocolErrorOf(() => decodeRaw(value, encoding), "bad_frame");
      }
    });

    it(`codec - rejects a malformed ${encoding} active field as bad_frame`, () => {
      for (const value of [
        { type: "join", page: "home", active: "true" },
        { type: "join", page: "home", active: 1 },
        { type: "join", page: "home", active: null },
        { type: "active", page: "home" },
        { type: "active", page: "home", active: "false" },
        { type: "active", page: "home", active: 0 },
      ]) {
        protocolErrorOf(() => decodeRaw(value, encoding), "bad_frame");
      }
      protocolErrorOf(() => decodeRaw({ type: "active", page: "", active: true }, encoding), "invalid_page");
    });

    it(`codec - rejects ${encoding} count frames whose active or connections is not a count`, () => {
      for (const value of [
        { type: "count", page: "p", viewers: 1, active: -1, counters: {}, ts: 1 },
        { type: "count", page: "p", viewers: 1, active: 1.5, counters: {}, ts: 1 },
        { type: "count", page: "p", viewers: 1, connections: "2", counters: {}, ts: 1 },
      ]) {
        protocolErrorOf(() => decodeServerFrame(raw(value, encoding), encoding), "bad_frame");
      }
    });

    it(`codec - rejects unknown ${encoding} frame types as unknown_type`, () => {
      for (const type of [
        "",
        "JOIN",
        "count",
        "pong",
        "error",
        "constructor",
        "__proto__",
        "toString",
        "x".repeat(1000),
      ]) {
        const err = protocolErrorOf(() => decodeRaw({ type, page: "home" }, encoding), "unknown_type");
        expect(err.message.length).toBeLessThan(100);
      }
    });

    it(`codec - checks the page of every paged ${encoding} frame by the id rules`, () => {
      for (const type of ["join", "leave", "watch", "unwatch"]) {
        for (const page of ["a", "\x21", "\x7e", "a".repeat(128)])
          expect(decodeRaw({ type, page }, encoding)).toEqual({ type, page });
        for (const page of [
          undefined,
          null,
          "",
          "a".repeat(129),
          " ",
          "a b",
          "\x7f",
          "café",
          42,
          ["home"],
          { p: 1 },
        ]) {
          protocolErrorOf(() => decodeRaw({ type, page }, encoding), "invalid_page");
        }
      }
    });

    it(`codec - checks the optional viewer of a ${encoding} join by the id rules`, () => {
      for (const viewer of ["v", "\x21", "\x7e", "v".repeat(128)]) {
        expect(decodeRaw({ type: "join", page: "p", viewer }, encoding)).toEqual({
          type: "join",
          page: "p",
          viewer,
        });
      }
      for (const viewer of [null, "", "v".repeat(129), " ", "\x7f", "vé", 7, false, {}]) {
        protocolErrorOf(() => decodeRaw({ type: "join", page: "p", viewer }, encoding), "invalid_viewer");
      }
      // An invalid page is reported before an invalid viewer.
      protocolErrorOf(() => decodeRaw({ type: "join", page: "", viewer: "" }, encoding), "invalid_page");
    });

    it(`codec - checks the optional token of a ${encoding} join or watch: a compact JWS of bounded length`, () => {
      const longest = `${"a".repeat(TOKEN_MAX_LENGTH - 4)}.b.c`;
      for (const type of ["join", "watch"]) {
        expect(decodeRaw({ type, page: "p", token: longest }, encoding)).toEqual({
          type,
          page: "p",
          token: longest,
        });
        for (const token of [
          null,
          "",
          "a.b",
          "a.b.c.d",
          "a.b.c ",
          "a.b=.c",
          `a${longest}`,
          7,
          {},
          ["a.b.c"],
        ]) {
          const e = protocolErrorOf(() => decodeRaw({ type, page: "p", token }, encoding), "unauthorized");
          expect(e.page).toBe("p");
        }
      }
      // Leave and unwatch need no token: one sent along is ignored like any unknown field.
      expect(decodeRaw({ type: "leave", page: "p", token: 7 }, encoding)).toEqual({
        type: "leave",
        page: "p",
      });
    });

    it(`codec - refuses ${encoding} frames over ${CLIENT_FRAME_MAX_BYTES} bytes as payload_too_large`, () => {
      const padded = (n: number): unknown => ({ type: "ping", pad: "x".repeat(n) });
      const fits = raw(padded(CLIENT_FRAME_MAX_BYTES - 100), encoding);
      expect(decodeClientFrame(fits, encoding)).toEqual({ type: "ping" });
      protocolErrorOf(() => decodeRaw(padded(CLIENT_FRAME_MAX_BYTES), encoding), "payload_too_large");
    });
  }

  it("codec - accepts JSON frames as a string, bytes, a view at an offset, or an ArrayBuffer", () => {
    const text = '{"type":"watch","page":"home"}';
    const bytes = new TextEncoder().encode(text);
    const offset = new Uint8Array(bytes.length + 3);
    offset.set(bytes, 3);
    const want = { type: "watch", page: "home" };
    expect(decodeClientFrame(text, "json")).toEqual(want);
    expect(decodeClientFrame(bytes, "json")).toEqual(want);
    expect(decodeClientFrame(offset.subarray(3), "json")).toEqual(want);
    expect(decodeClientFrame(bytes.buffer, "json")).toEqual(want);
  });

  it("codec - accepts msgpack frames as bytes, a view at an offset, or an ArrayBuffer", () => {
    const bytes = Uint8Array.from(pack({ type: "watch", page: "home" }));
    const offset = new Uint8Array(bytes.length + 5);
    offset.set(bytes, 5);
    const want = { type: "watch", page: "home" };
    expect(decodeClientFrame(bytes, "msgpack")).toEqual(want);
    expect(decodeClientFrame(offset.subarray(5), "msgpack")).toEqual(want);
    expect(decodeClientFrame(bytes.buffer, "msgpack")).toEqual(want);
  });

  it("codec - reports malformed JSON and UTF-8 as bad_frame and keeps the cause", () => {
    const err = protocolErrorOf(() => decodeClientFrame('{"type":"ping"', "json"), "bad_frame");
    expect(err.cause).toBeInstanceOf(SyntaxError);
    protocolErrorOf(() => decodeClientFrame("", "json"), "bad_frame");
    protocolErrorOf(() => decodeClientFrame("undefined", "json"), "bad_frame");
    protocolErrorOf(() => decodeClientFrame(Uint8Array.of(0x7b, 0xff, 0x7d), "json"), "bad_frame");
    // An overlong encoding of '"' and a lone surrogate are not valid UTF-8.
    protocolErrorOf(() => decodeClientFrame(Uint8Array.of(0xc0, 0xa2), "json"), "bad_frame");
    protocolErrorOf(
      () => decodeClientFrame(Uint8Array.of(0x22, 0xed, 0xa0, 0x80, 0x22), "json"),
      "bad_frame",
    );
  });

  it("codec - reports malformed msgpack as bad_frame", () => {
    const frame = Uint8Array.from(pack({ type: "ping" }));
    for (const bytes of [
      new Uint8Array(0),
      frame.subarray(0, frame.length - 1),
      Uint8Array.of(...frame, 0xc0), // trailing bytes
      Uint8Array.of(0xc1), // never used
      Uint8Array.from(pack(new Date(0))), // extension
      Uint8Array.from(pack({ type: "ping", at: new Date(0) })),
      Uint8Array.from(pack({ type: "ping", blob: Buffer.from("abc") })), // binary
      Uint8Array.of(0xdd, 0xff, 0xff, 0xff, 0xff), // array claiming 2^32 - 1 items
      Uint8Array.of(0xdf, 0x7f, 0xff, 0xff, 0xff, 0xa1, 0x61), // map claiming 2^31 - 1 entries
    ]) {
      protocolErrorOf(() => decodeClientFrame(bytes, "msgpack"), "bad_frame");
    }
    protocolErrorOf(() => decodeClientFrame('{"type":"ping"}', "msgpack"), "bad_frame");
  });

  it("codec - treats a msgpack-encoded undefined viewer as absent", () => {
    // msgpackr and notepack write undefined as fixext 1 of type 0.
    expect(decodeRaw({ type: "join", page: "home", viewer: undefined }, "msgpack")).toEqual({
      type: "join",
      page: "home",
    });
  });

  it("codec - never reads fields through a forged prototype", () => {
    // {"__proto__": {"type": "ping"}} must not make a frame whose type comes from its prototype.
    protocolErrorOf(() => decodeClientFrame('{"__proto__":{"type":"ping"}}', "json"), "bad_frame");
    protocolErrorOf(
      () => decodeRaw(Object.fromEntries([["__proto__", { type: "ping" }]]), "msgpack"),
      "bad_frame",
    );
  });

  it("codec - survives deep nesting: JSON ignores it in unknown fields, msgpack refuses it", () => {
    const deepJson = `{"type":"ping","x":${"[".repeat(2000)}${"]".repeat(2000)}}`;
    expect(decodeClientFrame(deepJson, "json")).toEqual({ type: "ping" });
    const deepMsgpack = Uint8Array.of(
      0x82,
      ...pack("type"),
      ...pack("ping"),
      ...pack("x"),
      ...new Array(2000).fill(0x91),
      0xc0,
    );
    protocolErrorOf(() => decodeClientFrame(deepMsgpack, "msgpack"), "bad_frame");
  });
});

describe("server frames", () => {
  for (const encoding of ENCODINGS) {
    it(`codec - round-trips every server frame as ${encoding}`, () => {
      for (const frame of SERVER_FRAMES) {
        const decoded = decodeServerFrame(encodeServerFrame(frame, encoding), encoding);
        expect(decoded).toEqual(frame);
        if (decoded.type === "count")
          expect(Object.keys(decoded.counters)).toEqual(Object.keys((frame as CountFrame).counters));
      }
    });

    it(`codec - encodes a count frame the same way through both ${encoding} encoders`, () => {
      const frame = SERVER_FRAMES[0] as CountFrame;
      expect(encodeCountFrame(frame, encoding)).toEqual(encodeServerFrame(frame, encoding));
    });

    it(`codec - leaves extra fields out of encoded ${encoding} server frames`, () => {
      const frame = { type: "pong", secret: "x" } as ServerFrame;
      expect(decodeServerFrame(encodeServerFrame(frame, encoding), encoding)).toEqual({ type: "pong" });
      const error = {
        type: "error",
        code: "internal",
        message: "m",
        page: undefined,
        stack: "...",
      } as ServerFrame;
      const encoded = encodeServerFrame(error, encoding);
      expect(decodeServerFrame(encoded, encoding)).toEqual({ type: "error", code: "internal", message: "m" });
    });

    it(`codec - rejects malformed ${encoding} server frames`, () => {
      const count = { type: "count", page: "home", viewers: 1, counters: { likes: 1 }, ts: TS };
      const bad: [unknown, string][] = [
        [{ ...count, viewers: -1 }, "bad_frame"],
        [{ ...count, viewers: 1.5 }, "bad_frame"],
        [{ ...count, ts: "now" }, "bad_frame"],
        [{ ...count, counters: [] }, "bad_frame"],
        [{ ...count, counters: { likes: "1" } }, "bad_frame"],
        [{ ...count, counters: { "li kes": 1 } }, "invalid_counter"],
        [{ ...count, page: "" }, "invalid_page"],
        [{ type: "error", code: "", message: "m" }, "bad_frame"],
        [{ type: "error", code: "x", message: 1 }, "bad_frame"],
        [{ type: "join", page: "home" }, "unknown_type"],
      ];
      for (const [value, code] of bad) {
        protocolErrorOf(
          () => decodeServerFrame(raw(value, encoding), encoding),
          code as ProtocolError["code"],
        );
      }
    });
  }

  it("codec - writes count frames in the protocol v1 JSON shape", () => {
    const frame: CountFrame = { type: "count", page: "home", viewers: 3, counters: { likes: 12 }, ts: TS };
    expect(encodeCountFrame(frame, "json")).toBe(
      `{"type":"count","page":"home","viewers":3,"counters":{"likes":12},"ts":${TS}}`,
    );
    expect(encodeServerFrame({ type: "pong" }, "json")).toBe('{"type":"pong"}');
  });

  it("codec - keeps earlier msgpack results intact after later encodes", () => {
    const first = encodeServerFrame({ type: "pong" }, "msgpack");
    const copy = Uint8Array.from(first);
    for (let i = 0; i < 2000; i++) encodeServerFrame(SERVER_FRAMES[0]!, "msgpack");
    expect(Uint8Array.from(first)).toEqual(copy);
  });
});

describe("error frames", () => {
  it("codec - builds error frames from codes with the standard message", () => {
    expect(errorFrame("invalid_page")).toEqual({
      type: "error",
      code: "invalid_page",
      message: ERROR_CODES.invalid_page.message,
    });
    expect(errorFrame("too_many_pages", "max 10", "home")).toEqual({
      type: "error",
      code: "too_many_pages",
      message: "max 10",
      page: "home",
    });
  });

  it("codec - answers a ProtocolError with its code and anything else as internal, without details", () => {
    expect(errorFrameOf(new ProtocolError("invalid_viewer"), "home")).toEqual({
      type: "error",
      code: "invalid_viewer",
      message: ERROR_CODES.invalid_viewer.message,
      page: "home",
    });
    expect(errorFrameOf(new Error("db password is hunter2"))).toEqual({
      type: "error",
      code: "internal",
      message: ERROR_CODES.internal.message,
    });
  });
});
