/**
 * The bus messages of the publisher API (resets, deletes, page listings) and the tombstone counters
 * they create: round trips, categories, and every malformed field rejected as bad_frame.
 */
import { pack } from "msgpackr";
import { describe, expect, it } from "vitest";
import {
  MAX_LIST_PAGES,
  VIEWERS_COUNTER,
  decodeMessage,
  decodeNodeReply,
  decodeNodeRequest,
  encodeMessage,
  isNodeReply,
  isNodeRequest,
  isPagePrefix,
  tombstoneOf,
  type InternalMessage,
} from "../src/index.js";
import { protocolErrorOf } from "./protocol_error_of.js";

const TS = 1_717_171_717_171;

const REQUESTS: readonly InternalMessage[] = [
  { type: "reset", page: "inbox/42", counter: "unread", key: "r-1", tombstone: false },
  { type: "reset", page: "home", counter: "__proto__", key: "k".repeat(128), tombstone: true, hop: 1 },
  { type: "list_pages", prefix: "", limit: 1 },
  { type: "list_pages", prefix: "article-", cursor: "article-9", limit: MAX_LIST_PAGES, hop: 0 },
];

const REPLIES: readonly InternalMessage[] = [
  {
    type: "counter_reset",
    page: "inbox/42",
    counter: "unread",
    previous: -7,
    updatedAt: TS,
    duplicate: false,
  },
  { type: "counter_reset", page: "home", counter: "likes", previous: 0, updatedAt: 0, duplicate: true },
  { type: "page_list", pages: [], cursor: undefined },
  { type: "page_list", pages: ["a", "a/b?c%d", "~"], cursor: "~" },
];

/** Tombstones travel in page states and updates like any counter. */
const WITH_TOMBSTONES: readonly InternalMessage[] = [
  {
    type: "page_state",
    page: "home",
    counters: {
      [VIEWERS_COUNTER]: { dc1: { p: 1, n: 0 } },
      likes: { dc1: { p: 3, n: 3 } },
      [tombstoneOf("likes")]: { dc1: { p: 6, n: 0 } },
    },
    ts: TS,
  },
  {
    type: "update",
    page: "home",
    dc: "dc2",
    counters: { [tombstoneOf("a:b.c-d_e")]: { p: 1, n: 0 } },
    ts: TS,
  },
];

const INVALID: Readonly<Record<string, readonly unknown[]>> = {
  page: [undefined, "", "a b", 1, "p".repeat(129)],
  counter: [undefined, "", VIEWERS_COUNTER, tombstoneOf("likes"), "li kes", "c".repeat(65)],
  key: [undefined, "", "k".repeat(129), "k y", 1],
  tombstone: [undefined, 0, "true", null],
  prefix: [undefined, null, 1, "a b", "p".repeat(129), "é"],
  cursor: ["", "a b", 1, null, "p".repeat(129)],
  limit: [undefined, 0, -1, 1.5, MAX_LIST_PAGES + 1, "10"],
  previous: [undefined, 1.5, "1", null, 2 ** 53],
  updatedAt: [undefined, -1, 0.5, null],
  duplicate: [undefined, 0, "false", null],
  pages: [undefined, {}, "a", [""], ["a b"], [1], [null]],
  hop: [-1, 1.5, "1", null],
};

function withField(msg: InternalMessage, field: string, value: unknown): unknown {
  const copy: Record<string, unknown> = { ...msg };
  if (value === undefined) delete copy[field];
  else copy[field] = value;
  return copy;
}

describe("internal codec - publisher messages", () => {
  it("internal - round-trips resets, listings and their replies, leaving an absent cursor out", () => {
    for (const msg of [...REQUESTS, ...REPLIES, ...WITH_TOMBSTONES]) {
      const decoded = decodeMessage(encodeMessage(msg));
      expect(decoded).toEqual(JSON.parse(JSON.stringify(msg)));
    }
    expect(Object.keys(decodeMessage(encodeMessage(REPLIES[2]!)))).toEqual(["type", "pages"]);
  });

  it("internal - resets and listings are node requests, their answers node replies", () => {
    for (const msg of REQUESTS) {
      expect(isNodeRequest(msg)).toBe(true);
      expect(decodeNodeRequest(encodeMessage(msg))).toEqual(msg);
      protocolErrorOf(() => decodeNodeReply(encodeMessage(msg)), "unknown_type");
    }
    for (const msg of REPLIES) {
      expect(isNodeReply(msg)).toBe(true);
      protocolErrorOf(() => decodeNodeRequest(encodeMessage(msg)), "unknown_type");
    }
  });

  it("internal - rejects every missing or malformed field of resets, listings and their replies", () => {
    let cases = 0;
    for (const msg of [...REQUESTS, ...REPLIES]) {
      const fields = [...Object.keys(msg), ...(isNodeRequest(msg) ? ["hop"] : [])];
      for (const field of fields) {
        if (field === "type") continue;
        const values = INVALID[field];
        if (values === undefined) throw new Error(`no invalid values for ${field}`);
        for (const value of values) {
          const bytes = Uint8Array.from(pack(withField(msg, field, value)));
          protocolErrorOf(() => decodeMessage(bytes), "bad_frame");
          cases++;
        }
      }
    }
    expect(cases).toBeGreaterThan(80);
  });

  it("internal - a tombstone name must name a public counter", () => {
    for (const name of ["@del:", "@del:li kes", "@del:@viewers", "@Del:x", "@del:@del:x"]) {
      const state = { ...WITH_TOMBSTONES[0]!, counters: { [name]: { dc1: { p: 1, n: 0 } } } };
      protocolErrorOf(() => decodeMessage(Uint8Array.from(pack(state))), "bad_frame");
    }
  });

  it("internal - a presence counter a later release adds passes through; other internal names do not", () => {
    for (const name of ["@active", "@connections", "@future"]) {
      const state = { ...WITH_TOMBSTONES[0]!, counters: { [name]: { dc1: { p: 1, n: 0 } } } };
      expect(decodeMessage(Uint8Array.from(pack(state)))).toMatchObject({ counters: { [name]: {} } });
    }
    for (const name of ["@", "@Active", "@a1", `@${"a".repeat(33)}`, "@a-b"]) {
      const state = { ...WITH_TOMBSTONES[0]!, counters: { [name]: { dc1: { p: 1, n: 0 } } } };
      protocolErrorOf(() => decodeMessage(Uint8Array.from(pack(state))), "bad_frame");
    }
  });

  it("ids - a page prefix is empty or up to 128 printable ASCII characters", () => {
    for (const ok of ["", "a", "article-", "~".repeat(128), "a/b?c%"]) expect(isPagePrefix(ok)).toBe(true);
    for (const bad of [" ", "a b", "é", "p".repeat(129), null, undefined, 1])
      expect(isPagePrefix(bad)).toBe(false);
  });
});
