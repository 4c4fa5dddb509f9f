import { describe, expect, test } from "vitest";
import { MSGPACK_MAX_DEPTH, guardMsgpack } from "../src/index.js";
import { protocolErrorOf } from "./protocol_error_of.js";

/** The reason guardMsgpack gives for refusing `bytes`. */
function refusal(bytes: number[], maxDepth?: number): string {
  return protocolErrorOf(() => guardMsgpack(new Uint8Array(bytes), maxDepth), "bad_frame").message;
}

function accepts(bytes: number[], maxDepth?: number): void {
  expect(() => guardMsgpack(new Uint8Array(bytes), maxDepth), JSON.stringify(bytes)).not.toThrow();
}

const fixints = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

describe("protocol - msgpack guard", () => {
  test("protocol - accepts every plain type at the edges of its encoding", () => {
    for (const bytes of [
      [0x00],
      [0x7f], // largest positive fixint
      [0xe0], // smallest negative fixint
      [0xff],
      [0xc0],
      [0xc2],
      [0xc3],
      [0x80], // empty map
      [0x8f, ...fixints(30)], // fixmap of 15 entries
      [0x90], // empty array
      [0x9f, ...fixints(15)], // fixarray of 15 items
      [0xa0],
      [0xbf, ...fixints(31)], // fixstr of 31 bytes
      [0xcc, 0xff],
      [0xd0, 0x80],
      [0xcd, 0xff, 0xff],
      [0xd1, 0x80, 0x00],
      [0xca, 0, 0, 0, 0],
      [0xce, 0, 0, 0, 1],
      [0xd2, 0, 0, 0, 1],
      [0xcb, 0, 0, 0, 0, 0, 0, 0, 0],
      [0xcf, 0, 0, 0, 0, 0, 0, 0, 1],
      [0xd3, 0, 0, 0, 0, 0, 0, 0, 1],
      [0xd9, 2, 0x61, 0x62],
      [0xda, 0, 2, 0x61, 0x62],
      [0xdb, 0, 0, 0, 2, 0x61, 0x62],
      [0xdc, 0, 1, 0xc0],
      [0xdd, 0, 0, 0, 1, 0xc0],
      [0xde, 0, 1, 0xa1, 0x61, 0xc0],
      [0xdf, 0, 0, 0, 1, 0xa1, 0x61, 0xc0],
      [0xd4, 0x00, 0x00], // undefined
    ]) {
      accepts(bytes);
    }
  });

  test("protocol - refuses extensions, binary and unused type bytes, naming the type", () => {
    expect(refusal([0xd4, 0x01, 0x00])).toBe("malformed msgpack: unsupported extension");
    expect(refusal([0xc4, 0x01, 0x00])).toBe("malformed msgpack: unsupported type 0xc4");
    expect(refusal([0xc1])).toBe("malformed msgpack: unsupported type 0xc1");
    expect(refusal([0xd5, 0x00, 0x00, 0x00])).toBe("malformed msgpack: unsupported type 0xd5");
  });

  test("protocol - refuses input that ends early, wherever it ends", () => {
    expect(refusal([])).toBe("malformed msgpack: truncated");
    expect(refusal([0xd9])).toBe("malformed msgpack: truncated length");
    expect(refusal([0xda, 0x00])).toBe("malformed msgpack: truncated length");
    expect(refusal([0xa3, 0x61])).toBe("malformed msgpack: truncated");
    expect(refusal([0xcd, 0x01])).toBe("malformed msgpack: truncated");
    expect(refusal([0x92, 0xc0, 0xcd, 0x01])).toBe("malformed msgpack: truncated");
    expect(refusal([0x92, 0xa1, 0x61])).toBe("malformed msgpack: truncated");
  });

  test("protocol - refuses more than one value", () => {
    expect(refusal([0xc0, 0xc0])).toBe("malformed msgpack: trailing bytes");
    expect(refusal([0x91, 0x01, 0x02])).toBe("malformed msgpack: trailing bytes");
  });

  test("protocol - refuses a container that claims more items than there are bytes left", () => {
    expect(refusal([0xdc, 0xff, 0xff])).toBe("malformed msgpack: length exceeds data");
    expect(refusal([0xdd, 0x00, 0x00, 0x00, 0x03, 0xc0, 0xc0])).toBe(
      "malformed msgpack: length exceeds data",
    );
    // A map of n entries holds 2n items.
    expect(refusal([0xdf, 0x00, 0x00, 0x00, 0x02, 0xc0, 0xc0, 0xc0])).toBe(
      "malformed msgpack: length exceeds data",
    );
    // Just enough bytes is not a lie.
    accepts([0x93, 0xc0, 0xc0, 0xc0]);
  });

  test("protocol - nests containers up to the depth limit and no deeper; empty ones take no level", () => {
    expect(MSGPACK_MAX_DEPTH).toBe(16);
    accepts([0x91, 0x91, 0xc0], 2);
    accepts([0x91, 0x91, 0x90], 2);
    accepts([0x91, 0x91, 0x80], 2);
    expect(refusal([0x91, 0x91, 0x91, 0xc0], 2)).toBe("malformed msgpack: nested too deeply");
    const deepest = [...Array<number>(MSGPACK_MAX_DEPTH).fill(0x91), 0xc0];
    accepts(deepest);
    expect(refusal([0x91, ...deepest])).toBe("malformed msgpack: nested too deeply");
  });
});
