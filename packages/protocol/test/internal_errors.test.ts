import { pack } from "msgpackr";
import { describe, expect, test } from "vitest";
import {
  MAX_AE_PAGES,
  MAX_APPLIED_KEYS,
  MAX_PARTITIONS,
  decodeBroadcast,
  decodeMessage,
  decodeNodeReply,
  decodeNodeRequest,
  encodeMessage,
} from "../src/index.js";
import { protocolErrorOf } from "./protocol_error_of.js";

/** The message decodeMessage refuses `value` (packed as msgpack) with. */
function refusal(value: unknown): string {
  return protocolErrorOf(() => decodeMessage(pack(value)), "bad_frame").message;
}

const ENTRY = { p: 1, n: 0 };
const DIGEST = "0123456789abcdef";

describe("internal - malformed messages", () => {
  test("internal - bytes that are not one plain msgpack value are refused with the guard's reason", () => {
    const err = protocolErrorOf(() => decodeMessage(new Uint8Array([0xc1])), "bad_frame");
    expect(err.message).toBe("malformed msgpack: unsupported type 0xc1");
    expect(refusal(5)).toBe("message must be a map");
    expect(refusal({ type: 5 })).toBe("unknown message type 5");
  });

  test("internal - a message of another kind than asked for names both", () => {
    const ack = encodeMessage({ type: "ack" });
    const snapshot = encodeMessage({ type: "snapshot", page: "p" });
    expect(protocolErrorOf(() => decodeNodeRequest(ack), "unknown_type").message).toBe(
      "expected a node request, got ack",
    );
    expect(protocolErrorOf(() => decodeNodeReply(snapshot), "unknown_type").message).toBe(
      "expected a node reply, got snapshot",
    );
    expect(protocolErrorOf(() => decodeBroadcast(ack), "unknown_type").message).toBe(
      "expected a broadcast, got ack",
    );
  });

  test("internal - a malformed container names the field it is in", () => {
    const cases: Array<[unknown, string]> = [
      [{ type: "presence", gateway: "g", partition: 1, ops: "x" }, "ops must be an array"],
      [{ type: "presence", gateway: "g", partition: 1, ops: [5] }, "presence op must be a map"],
      [{ type: "presence_sync", gateway: "g", partition: 1, pages: [] }, "pages must be a map"],
      [{ type: "presence_sync", gateway: "g", partition: 1, pages: { p: "v" } }, "viewers must be an array"],
      [{ type: "page_state", page: "p", counters: [], ts: 0 }, "counters must be a map"],
      [{ type: "page_state", page: "p", counters: { likes: [] }, ts: 0 }, "entries must be a map"],
      [{ type: "page_state", page: "p", counters: { likes: { dc1: 5 } }, ts: 0 }, "entry must be a map"],
      [{ type: "update", page: "p", dc: "dc1", counters: 5, ts: 0 }, "counters must be a map"],
      [{ type: "page_list", pages: "p" }, "pages must be an array"],
      [{ type: "page_list", pages: [""] }, "page id is malformed"],
      [{ type: "list_pages", prefix: "", cursor: "", limit: 10 }, "field cursor is malformed"],
      [{ type: "page_list", pages: [], cursor: 5 }, "field cursor is malformed"],
      [{ type: "updates", partition: 1, pages: [], ts: 0 }, "pages must be a map"],
      [{ type: "updates", partition: 1, pages: { p: [] }, ts: 0 }, "counters must be a map"],
      [{ type: "updates", partition: 1, pages: { "a b": {} }, ts: 0 }, "pages has a malformed key"],
      [
        { type: "updates", partition: 1, pages: { p: { "no way": {} } }, ts: 0 },
        "counters has a malformed key",
      ],
      [{ type: "ae_summary", from: "a", to: "b", digests: 5 }, "digests must be an array"],
      [{ type: "ae_buckets", from: "a", to: "b", partition: 1, digests: 5 }, "digests must be an array"],
      [{ type: "ae_entries", from: "a", to: "b", partition: 1, pages: {}, pull: 5 }, "pull must be an array"],
      [{ type: "ae_summary", from: "a", to: "b", digests: [], bootstrap: 5 }, "partitions must be an array"],
    ];
    for (const [value, message] of cases) expect(refusal(value), JSON.stringify(value)).toBe(message);
  });

  test("internal - a presence request's or a node heartbeat's reconnect count must be a natural number; absent it is absent", () => {
    const pages = { type: "presence_pages", gateway: "gw", partition: 1, pages: [] };
    const sync = { type: "presence_sync", gateway: "gw", partition: 1, pages: {} };
    const node = { type: "node", node: "n", incarnation: "i", leaseMs: 1000, state: "up" };
    for (const message of [pages, sync, node]) {
      expect(decodeMessage(pack({ ...message, reconnects: 3 }))).toMatchObject({ reconnects: 3 });
      expect(decodeMessage(pack(message))).not.toHaveProperty("reconnects");
      for (const bad of [-1, 1.5, "3", null])
        expect(refusal({ ...message, reconnects: bad })).toBe("field reconnects is malformed");
    }
  });

  test("internal - an updates message's taken epoch must be a natural number; absent it is absent", () => {
    const updates = { type: "updates", partition: 1, pages: {}, ts: 5 };
    expect(decodeMessage(pack({ ...updates, taken: 7 }))).toMatchObject({ taken: 7 });
    expect(decodeMessage(pack(updates))).not.toHaveProperty("taken");
    for (const bad of [-1, 1.5, "3", null])
      expect(refusal({ ...updates, taken: bad })).toBe("field taken is malformed");
  });

  test("internal - idempotency keys from another DC: 1..1000 of them, each a valid page, key, counter and delta, a short answer", () => {
    const key = { page: "p", key: "k", counter: "likes", delta: 1, payload: "{}" };
    const keys = (list: unknown): unknown => ({ type: "keys", dc: "eu", partition: 1, keys: list });
    expect(decodeBroadcast(encodeMessage(keys([key]) as never))).toMatchObject({ keys: [key] });
    const cases: Array<[unknown, string]> = [
      [keys([]), "keys must hold 1..1000 items"],
      [keys(Array.from({ length: MAX_APPLIED_KEYS + 1 }, () => key)), "keys must hold 1..1000 items"],
      [keys([5]), "applied key must be a map"],
      [keys([{ ...key, page: "" }]), "field page is missing or malformed"],
      [keys([{ ...key, key: "x".repeat(129) }]), "field key is missing or malformed"],
      [keys([{ ...key, counter: "@viewers" }]), "field counter is missing or malformed"],
      [keys([{ ...key, delta: 1.5 }]), "field delta is missing or malformed"],
      [keys([{ ...key, payload: "x".repeat(257) }]), "field payload is missing or malformed"],
      [keys([{ ...key, fingerprint: "" }]), "field fingerprint is malformed"],
      [{ type: "keys", dc: "eu", partition: -1, keys: [key] }, "partition is malformed"],
    ];
    for (const [value, message] of cases)
      expect(refusal(value), JSON.stringify(value).slice(0, 80)).toBe(message);
  });

  test("internal - a listing without a cursor has no cursor field", () => {
    expect(Object.keys(decodeMessage(pack({ type: "list_pages", prefix: "", limit: 10 })))).toEqual([
      "type",
      "prefix",
      "limit",
    ]);
    expect(Object.keys(decodeMessage(pack({ type: "page_list", pages: [] })))).toEqual(["type", "pages"]);
  });

  test("internal - a __proto__ key decodes to an ordinary own property", () => {
    const state = decodeMessage(
      pack(
        new Map<string, unknown>([
          ["type", "page_state"],
          ["page", "p"],
          ["counters", new Map([["__proto__", new Map([["dc1", ENTRY]])]])],
          ["ts", 0],
        ]),
      ),
    );
    if (state.type !== "page_state") throw new Error("expected a page_state");
    expect(Object.getOwnPropertyDescriptor(state.counters, "__proto__")).toEqual({
      value: { dc1: ENTRY },
      enumerable: true,
      writable: true,
      configurable: true,
    });
  });

  test("internal - size limits take their maximum and refuse one more", () => {
    const partitions = Array.from({ length: MAX_PARTITIONS }, (_, i) => i);
    expect(() =>
      decodeMessage(pack({ type: "ae_summary", from: "a", to: "b", digests: [], bootstrap: partitions })),
    ).not.toThrow();
    expect(
      refusal({ type: "ae_summary", from: "a", to: "b", digests: [], bootstrap: [...partitions, 0] }),
    ).toBe("too many partitions");

    const buckets = Array.from({ length: 4096 }, () => DIGEST);
    expect(() =>
      decodeMessage(pack({ type: "ae_buckets", from: "a", to: "b", partition: 1, digests: buckets })),
    ).not.toThrow();
    expect(
      refusal({ type: "ae_buckets", from: "a", to: "b", partition: 1, digests: [...buckets, DIGEST] }),
    ).toBe("too many buckets");
    const pull = Array.from({ length: 4096 }, (_, i) => i);
    expect(() =>
      decodeMessage(pack({ type: "ae_entries", from: "a", to: "b", partition: 1, pages: {}, pull })),
    ).not.toThrow();
    expect(
      refusal({ type: "ae_entries", from: "a", to: "b", partition: 1, pages: {}, pull: [...pull, 0] }),
    ).toBe("too many buckets");

    const pages = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, {}]));
    expect(() =>
      decodeMessage(pack({ type: "updates", partition: 1, pages: pages(MAX_AE_PAGES), ts: 0 })),
    ).not.toThrow();
    expect(refusal({ type: "updates", partition: 1, pages: pages(MAX_AE_PAGES + 1), ts: 0 })).toBe(
      `at most ${MAX_AE_PAGES} pages per message`,
    );
  });
});
