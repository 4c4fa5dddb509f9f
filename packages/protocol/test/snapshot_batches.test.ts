/**
 * The bus messages that carry snapshots of several pages (a gateway's `snapshots` request and its
 * owner's `page_states` answer): round trips, and malformed batches rejected as bad_frame.
 */
import { describe, expect, it } from "vitest";
import {
  MAX_SNAPSHOT_BATCH,
  pageStateBytes,
  decodeMessage,
  decodeNodeReply,
  decodeNodeRequest,
  encodeMessage,
  replyTo,
  type InternalMessage,
  type PageStateReply,
  type SnapshotsReply,
} from "../src/index.js";
import { protocolErrorOf } from "./protocol_error_of.js";
import { bytesOf, expectBatchRoundTrip } from "./batch_round_trip.js";

const TS = 1_717_171_717_171;

const BATCH: InternalMessage = { type: "snapshots", pages: ["home", "a/b?c%d", "__proto__"] };
const STATES: SnapshotsReply = {
  type: "page_states",
  replies: [
    { type: "page_state", page: "home", counters: { likes: { dc1: { p: 3, n: 1 } } }, ts: TS },
    { type: "error", code: "unavailable", message: "partition 7 is not owned yet" },
    { type: "page_state", page: "__proto__", counters: {}, ts: TS },
  ],
};

describe("internal codec - snapshot batches", () => {
  it("internal - round-trips a batch of snapshots and its per-page answers, in order", () => {
    expectBatchRoundTrip(BATCH, STATES);
    const request = { type: "snapshots", pages: ["home"] } as const;
    expect(replyTo(request, decodeNodeReply(encodeMessage(STATES)))).toEqual(STATES);
    protocolErrorOf(() => replyTo(request, STATES.replies[0]!), "internal");
  });

  it("internal - names 1..MAX_SNAPSHOT_BATCH valid page ids", () => {
    const full = { type: "snapshots", pages: Array.from({ length: MAX_SNAPSHOT_BATCH }, (_, i) => `p${i}`) };
    expect(decodeNodeRequest(encodeMessage(full as InternalMessage))).toEqual(full);
    const bad: unknown[] = [
      { type: "snapshots", pages: [] },
      { type: "snapshots", pages: [...full.pages, "one-more"] },
      { type: "snapshots" },
      { type: "snapshots", pages: "home" },
      { type: "snapshots", pages: ["home", "a b"] },
      { type: "snapshots", pages: ["home", 7] },
      { type: "snapshots", pages: ["home"], hop: -1 },
    ];
    for (const msg of bad) protocolErrorOf(() => decodeMessage(bytesOf(msg)), "bad_frame");
    // The error names the field at fault.
    expect(protocolErrorOf(() => decodeMessage(bytesOf(bad[0]))).message).toMatch(/^pages must hold/);
  });

  it("internal - an answer item is a page state or an error, never another reply", () => {
    const bad: unknown[] = [
      { type: "page_states", replies: [] },
      { type: "page_states", replies: [{ type: "ack" }] },
      { type: "page_states", replies: [{ type: "error", code: "no_such_code", message: "" }] },
      {
        type: "page_states",
        replies: [{ ...STATES.replies[0], counters: { likes: { dc1: { p: -1, n: 0 } } } }],
      },
      {
        type: "page_states",
        replies: Array.from({ length: MAX_SNAPSHOT_BATCH + 1 }, () => STATES.replies[2]),
      },
    ];
    for (const msg of bad) protocolErrorOf(() => decodeMessage(bytesOf(msg)), "bad_frame");
    expect(protocolErrorOf(() => decodeMessage(bytesOf(bad[0]))).message).toMatch(/^replies must hold/);
  });

  it("internal - a page state's size estimate is never below its msgpack, whatever its ids and numbers", () => {
    const long = (c: string, n: number): string => c.repeat(n);
    const states: PageStateReply[] = [
      { type: "page_state", page: "p", counters: {}, ts: 0 },
      // The longest page id and nothing else: the page id's bytes are most of it.
      { type: "page_state", page: long("a", 128), counters: {}, ts: Number.MAX_SAFE_INTEGER },
      STATES.replies[0] as PageStateReply,
      {
        type: "page_state",
        page: long("a", 128),
        counters: Object.fromEntries(
          Array.from({ length: 40 }, (_, i) => [
            `${long("c", 60)}${i}`,
            Object.fromEntries(
              Array.from({ length: 20 }, (_, d) => [
                `${long("d", 120)}${d}`,
                { p: Number.MAX_SAFE_INTEGER, n: Number.MAX_SAFE_INTEGER - d },
              ]),
            ),
          ]),
        ),
        ts: Number.MAX_SAFE_INTEGER,
      },
    ];
    for (const state of states) {
      const encoded = encodeMessage(state).byteLength;
      expect(pageStateBytes(state)).toBeGreaterThanOrEqual(encoded);
      // An estimate, not a bound out of reach: within twice the real size and 64 bytes.
      expect(pageStateBytes(state)).toBeLessThanOrEqual(2 * encoded + 64);
    }
  });
});
