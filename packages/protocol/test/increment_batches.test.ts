/**
 * The bus messages that carry publisher increments in batches (a gateway's `increments` request and
 * its owner's `increments_done` answer): round trips, categories, and malformed batches rejected as
 * bad_frame.
 */
import { describe, expect, it } from "vitest";
import {
  MAX_INCREMENT_BATCH,
  decodeMessage,
  decodeNodeReply,
  decodeNodeRequest,
  encodeIncrementsDone,
  encodeMessage,
  replyTo,
  type ErrorReply,
  type IncrementReply,
  type IncrementRequest,
  type IncrementsReply,
  type InternalMessage,
} from "../src/index.js";
import { protocolErrorOf } from "./protocol_error_of.js";
import { bytesOf, expectBatchRoundTrip } from "./batch_round_trip.js";

const TS = 1_717_171_717_171;

const item = (i: number, page = "hot"): IncrementRequest => ({
  type: "increment",
  page,
  counter: "likes",
  delta: i % 2 === 0 ? 1 : -3,
  key: `key-${i}`,
});

const BATCH: InternalMessage = { type: "increments", items: [item(0), item(1, "a/b?c%d"), item(2)] };
const DONE: IncrementsReply = {
  type: "increments_done",
  replies: [
    { type: "incremented", page: "hot", counter: "likes", value: 7, updatedAt: TS, duplicate: false },
    { type: "error", code: "idempotency_conflict", message: "the key was used for another change" },
    { type: "incremented", page: "hot", counter: "likes", value: 8, updatedAt: TS, duplicate: true },
  ],
};

describe("internal codec - increment batches", () => {
  it("internal - round-trips a batch of increments and its per-item answers, in order", () => {
    expectBatchRoundTrip(BATCH, DONE);
  });

  it("internal - encodeIncrementsDone writes encodeMessage's bytes, for every value size and both kinds of answer, each intact after thousands more", () => {
    const values = [0, 1, 31, 32, 127, 128, 65_536, 2 ** 32, Number.MAX_SAFE_INTEGER];
    const signed = values.flatMap((v) => [v, -v]);
    const pages = ["hot", "a/b?c%d", "p".repeat(31), "p".repeat(32), "p".repeat(256)];
    const messages = ["", "the key was used for another change", "m".repeat(300)];
    const encoded: Array<{ reply: IncrementsReply; bytes: Uint8Array }> = [];
    for (let b = 0; b < 3000; b++) {
      // Up to MAX_INCREMENT_BATCH answers: the 16-bit array header too.
      const size = b === 0 ? MAX_INCREMENT_BATCH : 1 + (b % 20);
      const replies = Array.from({ length: size }, (_, i): IncrementReply | ErrorReply => {
        const k = b + i;
        if (k % 7 === 3) {
          const error = {
            type: "error",
            code: k % 2 === 0 ? "unavailable" : "idempotency_conflict",
          } as const;
          // Not a valid answer (the decoder wants a message, whichever encoder wrote it), but written
          // as msgpackr writes an undefined field: left out.
          return k % 3 === 0
            ? (error as unknown as ErrorReply)
            : { ...error, message: messages[k % messages.length]! };
        }
        return {
          type: "incremented",
          page: pages[k % pages.length]!,
          counter: k % 2 === 0 ? "likes" : "claps",
          value: signed[k % signed.length]!,
          updatedAt: values[(k * 5) % values.length]!,
          duplicate: k % 4 === 0,
        };
      });
      const reply: IncrementsReply = { type: "increments_done", replies };
      encoded.push({ reply, bytes: encodeIncrementsDone(reply) });
    }
    const differ = encoded.filter(
      ({ reply, bytes }) => Buffer.compare(Buffer.from(bytes), Buffer.from(encodeMessage(reply))) !== 0,
    );
    expect(differ.length).toBe(0);
    expect(decodeMessage(encodeIncrementsDone(DONE))).toEqual(DONE);
  });

  it("internal - encodeIncrementsDone sizes its buffer for the widest strings and numbers: a reply larger than a buffer is written whole", () => {
    // Three UTF-8 bytes a unit leave a string's bound two bytes to spare; 2^40 takes nine bytes.
    const wide = (n: number): string => "€".repeat(n);
    const incremented: IncrementsReply = {
      type: "increments_done",
      replies: Array.from({ length: MAX_INCREMENT_BATCH }, () => ({
        type: "incremented",
        page: wide(1),
        counter: wide(3),
        value: -(2 ** 40),
        updatedAt: 2 ** 40,
        duplicate: true,
      })),
    };
    const errors = {
      type: "increments_done",
      replies: Array.from({ length: MAX_INCREMENT_BATCH }, () => ({
        type: "error",
        code: "unavailable",
        message: wide(20),
      })),
    } as IncrementsReply;
    for (const reply of [incremented, errors])
      expect(
        Buffer.compare(Buffer.from(encodeIncrementsDone(reply)), Buffer.from(encodeMessage(reply))),
      ).toBe(0);
  });

  it("internal - a batch request expects the batch answer; an error answer is the batch's error", () => {
    const request = { type: "increments", items: [item(0)] } as const;
    expect(replyTo(request, decodeNodeReply(encodeMessage(DONE)))).toEqual(DONE);
    protocolErrorOf(
      () => replyTo(request, { type: "error", code: "unavailable", message: "no owner" }),
      "unavailable",
    );
    protocolErrorOf(() => replyTo(request, DONE.replies[0]!), "internal");
  });

  it("internal - holds 1..MAX_INCREMENT_BATCH items, each a valid increment", () => {
    const full = {
      type: "increments",
      items: Array.from({ length: MAX_INCREMENT_BATCH }, (_, i) => item(i)),
    };
    expect(decodeNodeRequest(encodeMessage(full as InternalMessage))).toEqual(full);
    const bad: unknown[] = [
      { type: "increments", items: [] },
      { type: "increments", items: [...full.items, item(MAX_INCREMENT_BATCH)] },
      { type: "increments" },
      { type: "increments", items: item(0) },
      { type: "increments", items: [{ ...item(0), type: "reset" }] },
      { type: "increments", items: [{ ...item(0), page: "a b" }] },
      { type: "increments", items: [item(0), { ...item(1), delta: 1.5 }] },
      { type: "increments", items: [{ ...item(0), key: "" }] },
      { type: "increments", items: [item(0)], hop: -1 },
    ];
    for (const msg of bad) protocolErrorOf(() => decodeMessage(bytesOf(msg)), "bad_frame");
    // The error names the field or item at fault.
    const messageOf = (msg: unknown): string => protocolErrorOf(() => decodeMessage(bytesOf(msg))).message;
    expect(messageOf(bad[0])).toMatch(/^items must hold/);
    expect(messageOf({ type: "increments", items: [7] })).toBe("item must be a map");
    expect(messageOf(bad[4])).toBe("an item is not an increment");
  });

  it("internal - an answer item is incremented or an error, never another reply", () => {
    const bad: unknown[] = [
      { type: "increments_done", replies: [] },
      { type: "increments_done", replies: [{ type: "ack" }] },
      { type: "increments_done", replies: [{ type: "error", code: "no_such_code", message: "" }] },
      { type: "increments_done", replies: [{ ...DONE.replies[0], value: "7" }] },
    ];
    for (const msg of bad) protocolErrorOf(() => decodeMessage(bytesOf(msg)), "bad_frame");
    const messageOf = (msg: unknown): string => protocolErrorOf(() => decodeMessage(bytesOf(msg))).message;
    expect(messageOf(bad[0])).toMatch(/^replies must hold/);
    expect(messageOf(bad[1])).toBe("an increments reply item is neither incremented nor error");
    expect(messageOf({ type: "increments_done", replies: ["incremented"] })).toBe("reply must be a map");
  });
});
