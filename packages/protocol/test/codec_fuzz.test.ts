/**
 * Fuzzing the decoders: whatever the bytes, a decode returns a valid value or throws a
 * ProtocolError, never anything else, and never hangs or crashes. Seeds are printed; set
 * LIVECOUNT_TEST_SEED to replay one.
 */
import { pack } from "msgpackr";
import { describe, expect, it } from "vitest";
import {
  CLIENT_FRAME_MAX_BYTES,
  ProtocolError,
  VIEWERS_COUNTER,
  decodeClientFrame,
  decodeMessage,
  decodeServerFrame,
  encodeClientFrame,
  encodeMessage,
  encodeServerFrame,
  isBroadcast,
  isNodeReply,
  isNodeRequest,
  isPageId,
  isViewerId,
  type ClientFrame,
  type Encoding,
  type InternalMessage,
  type ServerFrame,
} from "../src/index.js";
import { mulberry32, testSeed, type Random } from "../../../test/support/prng.js";

const ITERATIONS = 3000;
const ENCODINGS: readonly Encoding[] = ["json", "msgpack"];

const KEYS = [
  "type",
  "page",
  "viewer",
  "counters",
  "viewers",
  "ts",
  "p",
  "n",
  "ops",
  "pages",
  "code",
  "message",
  "hop",
];
const KEYS_ODD = ["__proto__", "constructor", "toString", "", "x".repeat(300)];
const TYPES = [
  "join",
  "leave",
  "watch",
  "unwatch",
  "ping",
  "count",
  "error",
  "pong",
  "presence",
  "snapshot",
  "update",
  "updates",
  "ack",
];
const STRINGS = [
  "home",
  "a",
  "~",
  "",
  " ",
  "\x7f",
  "é",
  "😀",
  "\ud800",
  "a".repeat(128),
  "a".repeat(129),
  VIEWERS_COUNTER,
  "v:1",
];
const NUMBERS = [
  0,
  -0,
  1,
  -1,
  1.5,
  2 ** 31,
  2 ** 32,
  2 ** 53,
  -(2 ** 53),
  Number.MAX_VALUE,
  Number.MIN_VALUE,
];

function randomString(rnd: Random): string {
  if (rnd.chance(0.7)) return rnd.pick([...STRINGS, ...TYPES, ...KEYS]);
  let s = "";
  const length = rnd.int(20);
  for (let i = 0; i < length; i++)
    s += String.fromCharCode(rnd.chance(0.8) ? 0x20 + rnd.int(0x60) : rnd.int(0x10000));
  return s;
}

/** A random JSON-like value, biased towards the shapes and names the decoders look for. */
function randomValue(rnd: Random, depth = 0): unknown {
  const scalar = depth >= 4 || rnd.chance(0.5);
  if (scalar) {
    switch (rnd.int(5)) {
      case 0:
        return null;
      case 1:
        return rnd.chance(0.5);
      case 2:
        return rnd.chance(0.5) ? rnd.pick(NUMBERS) : rnd.int(1000) - 500;
      default:
        return randomString(rnd);
    }
  }
  if (rnd.chance(0.3)) return Array.from({ length: rnd.int(5) }, () => randomValue(rnd, depth + 1));
  const entries: [string, unknown][] = [];
  if (rnd.chance(0.7))
    entries.push(["type", rnd.chance(0.8) ? rnd.pick(TYPES) : randomValue(rnd, depth + 1)]);
  const fields = rnd.int(5);
  for (let i = 0; i < fields; i++) {
    const key = rnd.chance(0.9) ? rnd.pick(KEYS) : rnd.pick(KEYS_ODD);
    entries.push([key, randomValue(rnd, depth + 1)]);
  }
  return Object.fromEntries(entries);
}

function randomBytes(rnd: Random, maxLength: number): Uint8Array {
  return Uint8Array.from({ length: rnd.int(maxLength + 1) }, () => rnd.int(256));
}

/** Flips, inserts, deletes, duplicates or truncates a few bytes of a valid encoding. */
function mutate(rnd: Random, input: Uint8Array): Uint8Array {
  let bytes = [...input];
  const mutations = 1 + rnd.int(4);
  for (let m = 0; m < mutations; m++) {
    const at = rnd.int(bytes.length + 1);
    switch (rnd.int(5)) {
      case 0:
        if (at < bytes.length) bytes[at] = rnd.int(256);
        break;
      case 1:
        bytes.splice(at, 0, rnd.int(256));
        break;
      case 2:
        bytes.splice(at, 1 + rnd.int(3));
        break;
      case 3:
        bytes.splice(at, 0, ...bytes.slice(at, at + 1 + rnd.int(8)));
        break;
      default:
        bytes = bytes.slice(0, at);
    }
  }
  return Uint8Array.from(bytes);
}

function asBytes(encoded: string | Uint8Array): Uint8Array {
  return typeof encoded === "string" ? new TextEncoder().encode(encoded) : Uint8Array.from(encoded);
}

/** Runs a decode: it returns a value (checked by `valid`) or throws a ProtocolError. */
function expectTotal<T>(decode: () => T, valid: (v: T) => boolean, context: () => string): "ok" | "rejected" {
  let result: T;
  try {
    result = decode();
  } catch (err) {
    if (!(err instanceof ProtocolError)) expect.fail(`${context()}: threw ${String(err)}`);
    return "rejected";
  }
  if (!valid(result)) expect.fail(`${context()}: returned an invalid value ${JSON.stringify(result)}`);
  return "ok";
}

function hasOnlyKeys(v: object, keys: readonly string[]): boolean {
  return Object.keys(v).every((k) => keys.includes(k));
}

function isValidClientFrame(f: ClientFrame): boolean {
  switch (f.type) {
    case "join":
      return (
        hasOnlyKeys(f, ["type", "page", "viewer"]) &&
        isPageId(f.page) &&
        (f.viewer === undefined || isViewerId(f.viewer))
      );
    case "leave":
    case "watch":
    case "unwatch":
      return hasOnlyKeys(f, ["type", "page"]) && isPageId(f.page);
    case "ping":
      return hasOnlyKeys(f, ["type"]);
    default:
      return false;
  }
}

function isValidServerFrame(f: ServerFrame): boolean {
  return (
    ["count", "error", "pong"].includes(f.type) && decodeServerFrame(JSON.stringify(f), "json") !== undefined
  );
}

/** A decoded message is stable: encoding and decoding it again gives the same message. */
function isStableMessage(msg: InternalMessage): boolean {
  const again = decodeMessage(encodeMessage(msg));
  return (
    (isNodeRequest(msg) || isNodeReply(msg) || isBroadcast(msg)) &&
    JSON.stringify(again) === JSON.stringify(msg)
  );
}

const VALID_CLIENT: readonly ClientFrame[] = [
  { type: "join", page: "home", viewer: "v-1" },
  { type: "join", page: "home" },
  { type: "leave", page: "p" },
  { type: "watch", page: "w" },
  { type: "unwatch", page: "u" },
  { type: "ping" },
];

const VALID_SERVER: readonly ServerFrame[] = [
  { type: "count", page: "home", viewers: 3, counters: { likes: 12, "re:heart": 1 }, ts: 1_717_171_717_171 },
  { type: "error", code: "invalid_page", message: "m", page: "home" },
  { type: "pong" },
];

const VALID_MESSAGES: readonly InternalMessage[] = [
  {
    type: "presence",
    gateway: "gw",
    partition: 7,
    ops: [{ page: "home", viewer: "v:a", present: true }],
    hop: 1,
  },
  { type: "presence_sync", gateway: "gw", partition: 7, pages: { home: ["v:a", "s:gw:1"] } },
  { type: "increment", page: "home", counter: "likes", delta: 2, key: "k1" },
  {
    type: "page_state",
    page: "home",
    counters: { [VIEWERS_COUNTER]: { dc1: { p: 3, n: 1 } }, likes: { dc2: { p: 4, n: 0 } } },
    ts: 5,
  },
  { type: "update", page: "home", dc: "dc1", counters: { likes: { p: 4, n: 1 } }, ts: 5 },
  { type: "node", node: "n1", incarnation: "i-1", leaseMs: 6000, state: "up" },
];

describe("codec fuzzing", () => {
  it("fuzz - client frames: random bytes, random values and mutated frames decode or throw ProtocolError", () => {
    const seed = testSeed("client frame fuzz");
    const rnd = mulberry32(seed);
    const outcomes = { ok: 0, rejected: 0 };
    for (let i = 0; i < ITERATIONS; i++) {
      const encoding = rnd.pick(ENCODINGS);
      let input: Uint8Array | string;
      switch (i % 4) {
        case 0:
          input = randomBytes(rnd, 64);
          break;
        case 1: {
          const value = randomValue(rnd);
          input = encoding === "json" ? JSON.stringify(value) : Uint8Array.from(pack(value));
          break;
        }
        case 2: {
          // A valid frame with random extra fields (and sometimes a random page or viewer).
          const value = {
            ...(randomValue(rnd, 3) as object),
            ...rnd.pick(VALID_CLIENT),
            ...(randomValue(rnd, 3) as object),
          };
          input = encoding === "json" ? JSON.stringify(value) : Uint8Array.from(pack(value));
          break;
        }
        default:
          input = mutate(rnd, asBytes(encodeClientFrame(rnd.pick(VALID_CLIENT), encoding)));
      }
      outcomes[
        expectTotal(
          () => decodeClientFrame(input, encoding),
          isValidClientFrame,
          () => `seed ${seed} iteration ${i}`,
        )
      ]++;
    }
    // The corpus exercises both outcomes, so neither path is vacuous.
    expect(outcomes.ok).toBeGreaterThan(ITERATIONS / 20);
    expect(outcomes.rejected).toBeGreaterThan(ITERATIONS / 4);
  });

  it("fuzz - server frames: mutated and random frames decode or throw ProtocolError", () => {
    const seed = testSeed("server frame fuzz");
    const rnd = mulberry32(seed);
    for (let i = 0; i < ITERATIONS; i++) {
      const encoding = rnd.pick(ENCODINGS);
      const input =
        i % 2 === 0
          ? mutate(rnd, asBytes(encodeServerFrame(rnd.pick(VALID_SERVER), encoding)))
          : asBytes(encoding === "json" ? JSON.stringify(randomValue(rnd)) : pack(randomValue(rnd)));
      expectTotal(
        () => decodeServerFrame(input, encoding),
        isValidServerFrame,
        () => `seed ${seed} iteration ${i}`,
      );
    }
  });

  it("fuzz - internal messages: random bytes, random values and mutated messages decode or throw ProtocolError", () => {
    const seed = testSeed("internal message fuzz");
    const rnd = mulberry32(seed);
    let ok = 0;
    for (let i = 0; i < ITERATIONS; i++) {
      let input: Uint8Array;
      switch (i % 3) {
        case 0:
          input = randomBytes(rnd, 64);
          break;
        case 1:
          input = Uint8Array.from(pack(randomValue(rnd)));
          break;
        default:
          input = mutate(rnd, Uint8Array.from(encodeMessage(rnd.pick(VALID_MESSAGES))));
      }
      if (
        expectTotal(
          () => decodeMessage(input),
          isStableMessage,
          () => `seed ${seed} iteration ${i}`,
        ) === "ok"
      )
        ok++;
    }
    expect(ok).toBeGreaterThan(0);
  });

  it("fuzz - deep nesting and huge lengths are refused without exhausting the stack or memory", () => {
    const depth = 200_000;
    const deepJson = "[".repeat(depth) + "]".repeat(depth);
    const deepMsgpack = new Uint8Array(depth + 1).fill(0x91);
    deepMsgpack[depth] = 0xc0;
    // {"a": {"a": ... nil}}
    const deepMap = new Uint8Array(3 * depth + 1).map((_, i) => [0x81, 0xa1, 0x61][i % 3]!);
    deepMap[3 * depth] = 0xc0;
    const hugeArray = Uint8Array.of(0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0);
    const hugeMap = Uint8Array.of(0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 0x61, 0xc0);
    const hugeString = Uint8Array.of(0xdb, 0xff, 0xff, 0xff, 0xff, 0x61);
    const wide = Uint8Array.from(pack({ type: "ping", x: new Array(CLIENT_FRAME_MAX_BYTES).fill(0) }));
    for (const encoding of ENCODINGS) {
      for (const input of [deepJson, deepMsgpack, deepMap, hugeArray, hugeMap, hugeString, wide]) {
        if (typeof input === "string" && encoding === "msgpack") continue;
        expect(() => decodeClientFrame(input, encoding)).toThrow(ProtocolError);
        expect(() => decodeServerFrame(input, encoding)).toThrow(ProtocolError);
      }
    }
    for (const input of [deepMsgpack, deepMap, hugeArray, hugeMap, hugeString]) {
      expect(() => decodeMessage(input)).toThrow(ProtocolError);
    }
  });
});
