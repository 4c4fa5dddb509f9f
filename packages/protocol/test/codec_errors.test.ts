import { pack, unpack } from "msgpackr";
import { describe, expect, test } from "vitest";
import {
  CLIENT_FRAME_MAX_BYTES,
  decodeClientFrame,
  decodeServerFrame,
  encodeClientFrame,
  encodeCountFrame,
  encodeServerFrame,
  errorFrame,
  isErrorCode,
  type Encoding,
} from "../src/index.js";
import { protocolErrorOf } from "./protocol_error_of.js";

const ENCODINGS: readonly Encoding[] = ["json", "msgpack"];

/** The keys a msgpack encoding holds, undefined-valued ones included. */
function msgpackKeys(bytes: Uint8Array): string[] {
  return Object.keys(unpack(bytes) as object);
}

describe("protocol - frame errors and optional fields", () => {
  test("protocol - a client frame that is not text of a JSON object says why, and keeps the cause", () => {
    const utf8 = protocolErrorOf(
      () => decodeClientFrame(new Uint8Array([0x7b, 0xff, 0x7d]), "json"),
      "bad_frame",
    );
    expect(utf8.message).toBe("frame is not valid UTF-8");
    expect(utf8.cause).toBeInstanceOf(TypeError);
    const json = protocolErrorOf(() => decodeClientFrame("{nope", "json"), "bad_frame");
    expect(json.message).toBe("frame is not valid JSON");
    expect(json.cause).toBeInstanceOf(SyntaxError);
    for (const notObject of ["null", "5", '"join"', "[]", "true"]) {
      expect(protocolErrorOf(() => decodeClientFrame(notObject, "json"), "bad_frame").message).toBe(
        "frame must be an object",
      );
    }
    // msgpack's undefined (fixext 1 of type 0) is no object either.
    const undef = new Uint8Array([0xd4, 0x00, 0x00]);
    expect(protocolErrorOf(() => decodeClientFrame(undef, "msgpack"), "bad_frame").message).toBe(
      "frame must be an object",
    );
    for (const badType of ['{"page":"p"}', '{"type":5}', '{"type":null}']) {
      expect(protocolErrorOf(() => decodeClientFrame(badType, "json"), "bad_frame").message).toBe(
        "frame must have a string type",
      );
    }
  });

  test("protocol - an error raised without a cause carries none", () => {
    const err = protocolErrorOf(() => decodeClientFrame("{}", "msgpack"), "bad_frame");
    expect(err.message).toBe("msgpack frames must be binary");
    expect("cause" in err).toBe(false);
  });

  test("protocol - an unknown frame type is echoed, cut to 32 characters", () => {
    const err = protocolErrorOf(
      () => decodeClientFrame(JSON.stringify({ type: "x".repeat(40) }), "json"),
      "unknown_type",
    );
    expect(err.message).toBe(`unknown frame type "${"x".repeat(32)}"`);
  });

  test("protocol - a token that is not a compact JWS is refused with the page it named", () => {
    const err = protocolErrorOf(
      () => decodeClientFrame(JSON.stringify({ type: "join", page: "home", token: "not-a-jwt" }), "json"),
      "unauthorized",
    );
    expect(err.message).toBe("token must be a JWT (compact JWS) of at most 2048 characters");
    expect(err.page).toBe("home");
  });

  test("protocol - a client frame of exactly the size limit is read, in any buffer; one byte more is not", () => {
    const frame = JSON.stringify({ type: "join", page: "home" });
    const exact = frame + " ".repeat(CLIENT_FRAME_MAX_BYTES - frame.length);
    expect(decodeClientFrame(exact, "json")).toEqual({ type: "join", page: "home" });
    const tooBig = new TextEncoder().encode(`${exact} `);
    protocolErrorOf(() => decodeClientFrame(tooBig, "json"), "payload_too_large");
    protocolErrorOf(() => decodeClientFrame(tooBig.buffer, "json"), "payload_too_large");
    protocolErrorOf(() => decodeClientFrame(tooBig.buffer, "msgpack"), "payload_too_large");
  });

  test("protocol - decoded and encoded frames hold no key for an absent optional field", () => {
    for (const encoding of ENCODINGS) {
      const join = decodeClientFrame(encodeClientFrame({ type: "join", page: "p" }, encoding), encoding);
      expect(Object.keys(join)).toEqual(["type", "page"]);
    }
    expect(msgpackKeys(encodeClientFrame({ type: "join", page: "p" }, "msgpack"))).toEqual(["type", "page"]);
    expect(msgpackKeys(encodeClientFrame({ type: "watch", page: "p" }, "msgpack"))).toEqual(["type", "page"]);
    const count = { type: "count", page: "p", viewers: 1, counters: {}, ts: 5 } as const;
    expect(msgpackKeys(encodeCountFrame(count, "msgpack"))).toEqual([
      "type",
      "page",
      "viewers",
      "counters",
      "ts",
    ]);
    expect(msgpackKeys(encodeServerFrame(errorFrame("internal"), "msgpack"))).toEqual([
      "type",
      "code",
      "message",
    ]);
    expect(Object.keys(errorFrame("internal"))).toEqual(["type", "code", "message"]);
    for (const encoding of ENCODINGS) {
      expect(Object.keys(decodeServerFrame(encodeCountFrame(count, encoding), encoding))).toEqual([
        "type",
        "page",
        "viewers",
        "counters",
        "ts",
      ]);
    }
  });

  test("protocol - a count frame's data centers and lag go out and come back when present", () => {
    const count = { type: "count", page: "p", viewers: 1, counters: { likes: 2 }, ts: 5 } as const;
    for (const encoding of ENCODINGS) {
      const full = { ...count, dcs: ["dc1", "dc2"], lag_ms: 0 };
      expect(decodeServerFrame(encodeCountFrame(full, encoding), encoding)).toEqual(full);
      expect(decodeServerFrame(encodeServerFrame({ ...count, lag_ms: 30 }, encoding), encoding)).toEqual({
        ...count,
        lag_ms: 30,
      });
    }
  });

  test("protocol - a malformed server frame is refused with what is wrong in it", () => {
    const count = { type: "count", page: "p", viewers: 1, counters: {}, ts: 5 };
    const cases: Array<[object, string]> = [
      [{ ...count, viewers: -1 }, "viewers must be a non-negative safe integer"],
      [{ ...count, ts: 1.5 }, "ts must be a non-negative safe integer"],
      [{ ...count, counters: [] }, "counters must be an object"],
      [{ ...count, counters: { likes: 0.5 } }, "counter likes must be a safe integer"],
      [{ ...count, dcs: "dc1" }, "dcs must be a list of data center ids"],
      [{ ...count, dcs: ["dc1", 2] }, "dcs must be a list of data center ids"],
      [{ ...count, lag_ms: -5 }, "lag_ms must be a non-negative safe integer"],
      [{ type: "error", code: "", message: "m" }, "code must be a non-empty string"],
      [{ type: "error", code: 5, message: "m" }, "code must be a non-empty string"],
      [{ type: "error", code: "internal", message: 5 }, "message must be a string"],
    ];
    for (const [frame, message] of cases) {
      for (const encoding of ENCODINGS) {
        const data = encoding === "json" ? JSON.stringify(frame) : pack(frame);
        expect(protocolErrorOf(() => decodeServerFrame(data, encoding), "bad_frame").message).toBe(message);
      }
    }
  });

  test("protocol - a msgpack server frame whose map has a key that is not a string is refused", () => {
    // {1: 2}
    const err = protocolErrorOf(
      () => decodeServerFrame(new Uint8Array([0x81, 0x01, 0x02]), "msgpack"),
      "bad_frame",
    );
    expect(err.message).toBe("map keys must be strings");
  });

  test("protocol - only a string that names a code in the table is an error code", () => {
    expect(isErrorCode("internal")).toBe(true);
    for (const v of [["internal"], "toString", "", 5, undefined]) expect(isErrorCode(v)).toBe(false);
  });
});
