import { Packr } from "msgpackr";
import { describe, expect, it } from "vitest";
import { MsgpackWriter, VALUE_BOUND, stringBound } from "../src/index.js";

/** msgpackr as the codec's packers use it: no records, the smallest header of each size. */
const packr = new Packr({ useRecords: false, variableMapSize: true });

/** Units around each string header's boundary (fixstr 31, str8 255, str16 65,535) and msgpackr's 64-unit switch. */
const LENGTHS = [
  0, 1, 30, 31, 32, 33, 63, 64, 65, 84, 85, 86, 127, 128, 254, 255, 256, 257, 21_845, 65_535, 65_536,
];
/**
 * One unit of each UTF-8 width and the first and last of each (U+007F, U+0080, U+07FF, U+0800), a
 * pair, and lone surrogates (msgpackr writes those as three bytes below 64 units).
 */
const UNITS = ["a", "\u007f", "\u0080", "é", "\u07ff", "\u0800", "€", "😀", "\ud800", "\udc00"];

function written(write: (w: MsgpackWriter) => void, bound: number): Buffer {
  const w = new MsgpackWriter();
  w.begin(bound);
  write(w);
  return Buffer.from(w.end());
}

describe("protocol - MsgpackWriter", () => {
  it("protocol - strings are msgpackr's bytes at every header boundary, in every UTF-8 width, lone surrogates too", () => {
    const differ: string[] = [];
    for (const unit of UNITS) {
      for (const length of LENGTHS) {
        // The length in units, then the same with an ASCII prefix (the fast path ends mid-string).
        for (const s of [
          unit.repeat(Math.ceil(length / unit.length)).slice(0, length),
          `ab${unit.repeat(length)}`,
        ]) {
          const bytes = written((w) => w.string(s), stringBound(s));
          if (bytes.compare(Buffer.from(packr.pack(s))) !== 0)
            differ.push(`${JSON.stringify(unit)} x ${s.length}`);
        }
      }
    }
    expect(differ).toEqual([]);
  });

  it("protocol - naturals, booleans and container headers are msgpackr's bytes at every size boundary", () => {
    const naturals = [
      0,
      1,
      127,
      128,
      255,
      256,
      65_535,
      65_536,
      2 ** 32 - 1,
      2 ** 32,
      2 ** 40 + 3,
      Number.MAX_SAFE_INTEGER,
    ];
    for (const v of naturals)
      expect(written((w) => w.natural(v), VALUE_BOUND)).toEqual(Buffer.from(packr.pack(v)));
    for (const b of [true, false])
      expect(written((w) => w.boolean(b), VALUE_BOUND)).toEqual(Buffer.from(packr.pack(b)));
    for (const n of [0, 1, 15, 16, 65_535, 65_536]) {
      const array = Array.from({ length: n }, () => 0);
      // Buffer.compare: a deep comparison of 600 KB takes seconds.
      const arrayBytes = written((w) => (w.array(n), array.forEach(() => w.natural(0))), VALUE_BOUND + n);
      expect(Buffer.compare(arrayBytes, Buffer.from(packr.pack(array))), `array of ${n}`).toBe(0);
      const map = new Map(Array.from({ length: n }, (_, i) => [i, 0]));
      const mapBytes = written(
        (w) => (w.map(n), map.forEach((_, k) => (w.natural(k), w.natural(0)))),
        VALUE_BOUND * (1 + 2 * n),
      );
      expect(Buffer.compare(mapBytes, Buffer.from(packr.pack(map))), `map of ${n}`).toBe(0);
    }
  });

  it("protocol - without Node's Buffer (outside Node) strings are written by TextEncoder, the same bytes", () => {
    const global = globalThis as { Buffer?: typeof Buffer };
    const saved = global.Buffer;
    let w: MsgpackWriter;
    try {
      global.Buffer = undefined;
      w = new MsgpackWriter();
    } finally {
      global.Buffer = saved;
    }
    const strings = [32, 63, 64, 300].flatMap((n) => [
      "a".repeat(n),
      `${"a".repeat(n - 2)}é`,
      `\ud800${"b".repeat(n)}`,
    ]);
    for (const s of strings) {
      w.begin(stringBound(s));
      w.string(s);
      expect(Buffer.compare(Buffer.from(w.end()), Buffer.from(packr.pack(s))), `${s.length} units`).toBe(0);
    }
  });

  it("protocol - integers of either sign are msgpackr's bytes at every size boundary", () => {
    const magnitudes = [0, 1, 31, 32, 33, 127, 128, 129, 255, 256, 32_767, 32_768, 32_769, 65_535, 65_536];
    const wide = [
      2 ** 31 - 1,
      2 ** 31,
      2 ** 31 + 1,
      2 ** 32 - 1,
      2 ** 32,
      2 ** 40 + 3,
      Number.MAX_SAFE_INTEGER,
    ];
    const values = [...magnitudes, ...wide].flatMap((v) => [v, -v]);
    const differ = values.filter(
      (v) => written((w) => w.integer(v), VALUE_BOUND).compare(Buffer.from(packr.pack(v))) !== 0,
    );
    expect(differ).toEqual([]);
  });

  it("protocol - a message larger than a buffer gets one of its own, and earlier messages stay intact", () => {
    const w = new MsgpackWriter();
    const small: Array<[string, Uint8Array]> = [];
    for (let i = 0; i < 200; i++) {
      const s = `message-${i}-${"x".repeat(i * 7)}`;
      w.begin(stringBound(s));
      w.string(s);
      small.push([s, w.end()]);
      if (i === 100) {
        const big = "€".repeat(40_000);
        w.begin(stringBound(big));
        w.string(big);
        expect(Buffer.compare(Buffer.from(w.end()), Buffer.from(packr.pack(big)))).toBe(0);
      }
    }
    for (const [s, bytes] of small) expect(Buffer.from(bytes)).toEqual(Buffer.from(packr.pack(s)));
  });
});
