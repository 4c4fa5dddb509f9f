import { describe, expect, it } from "vitest";
import {
  HOLD_DROPPED,
  HOLD_LEFT,
  MAX_VIEWER_SOCKETS,
  activeOfCode,
  codeOf,
  decodeNodeRequest,
  encodeMessage,
  holdCode,
  opsOf,
  socketsOfCode,
  transitionsOf,
  type PresenceOp,
  type PresencePages,
} from "../src/index.js";
import { protocolErrorOf } from "./protocol_error_of.js";

describe("presence pages", () => {
  it("presence pages - a hold code gives back its sockets and attention, and is never a departure", () => {
    for (const sockets of [1, 2, 3, 1000, MAX_VIEWER_SOCKETS]) {
      for (const active of [true, false]) {
        const code = holdCode(sockets, active);
        expect(code).toBeGreaterThanOrEqual(2);
        expect(socketsOfCode(code)).toBe(sockets);
        expect(activeOfCode(code)).toBe(active);
      }
    }
    expect(holdCode(1, true)).toBe(3);
    expect([HOLD_LEFT, HOLD_DROPPED]).toEqual([0, -1]);
  });

  it("presence pages - ops become transitions and back, defaults left out as a presence batch leaves them", () => {
    const ops: PresenceOp[] = [
      { page: "home", viewer: "v:a", present: true },
      { page: "home", viewer: "v:b", present: true, sockets: 3 },
      { page: "home", viewer: "v:c", present: true, active: false },
      { page: "home", viewer: "v:d", present: true, sockets: 2, active: false },
      { page: "home", viewer: "v:e", present: false },
      { page: "home", viewer: "v:f", present: false, drop: true },
    ];
    const transitions = transitionsOf(ops);
    expect(transitions).toEqual(["v:a", 3, "v:b", 7, "v:c", 2, "v:d", 4, "v:e", 0, "v:f", -1]);
    expect(opsOf(["home", transitions])).toEqual(ops);
    // Explicit defaults mean the same hold as absent ones.
    expect(codeOf({ viewer: "v:a", present: true, sockets: 1, active: true })).toBe(3);
    expect(codeOf({ viewer: "v:a", present: false, drop: false })).toBe(HOLD_LEFT);
  });

  it("presence pages - a large batch decodes to the arrays it was encoded from", () => {
    const codes = [3, HOLD_LEFT, HOLD_DROPPED, 2, 7];
    const pages: Array<[string, Array<string | number>]> = Array.from({ length: 100 }, (_, p) => [
      `page-${p}`,
      Array.from({ length: 400 }, (_, i) => (i % 2 === 0 ? `v:${p}-${i}` : codes[(i >> 1) % codes.length]!)),
    ]);
    const batch: PresencePages = { type: "presence_pages", gateway: "gw", partition: 3, pages };
    const decoded = decodeNodeRequest(encodeMessage(batch));
    expect(decoded).toEqual(batch);
    // Smaller on the wire than the same transitions as a presence batch.
    const asOps = encodeMessage({ type: "presence", gateway: "gw", partition: 3, ops: pages.flatMap(opsOf) });
    expect(encodeMessage(batch).byteLength).toBeLessThan(asOps.byteLength / 2);
  });

  it("presence pages - a viewer may be held with MAX_VIEWER_SOCKETS sockets, in either form, and no more", () => {
    const at = (code: number): PresencePages => ({
      type: "presence_pages",
      gateway: "gw",
      partition: 1,
      pages: [["home", ["v:a", code]]],
    });
    for (const active of [true, false]) {
      const code = holdCode(MAX_VIEWER_SOCKETS, active);
      expect(decodeNodeRequest(encodeMessage(at(code)))).toEqual(at(code));
      expect(() => decodeNodeRequest(encodeMessage(at(code + 2)))).toThrow(/hold code/);
    }
    const op = (sockets: number) =>
      encodeMessage({
        type: "presence",
        gateway: "gw",
        partition: 1,
        ops: [{ page: "home", viewer: "v:a", present: true, sockets }],
      });
    expect(decodeNodeRequest(op(MAX_VIEWER_SOCKETS))).toMatchObject({
      ops: [{ sockets: MAX_VIEWER_SOCKETS }],
    });
    expect(() => decodeNodeRequest(op(MAX_VIEWER_SOCKETS + 1))).toThrow(/sockets/);
  });

  it("presence pages - a batch with a page without transitions, or an unvisited entry that is not [page id, viewer keys], is refused", () => {
    const batch = (extra: object): PresencePages =>
      ({
        type: "presence_pages",
        gateway: "gw",
        partition: 1,
        pages: [["home", ["v:a", 3]]],
        ...extra,
      }) as PresencePages;
    expect(decodeNodeRequest(encodeMessage(batch({ unvisited: [["home", ["v:a"]]] })))).toEqual(
      batch({ unvisited: [["home", ["v:a"]]] }),
    );
    const refused = (extra: object): string =>
      protocolErrorOf(() => decodeNodeRequest(encodeMessage(batch(extra))), "bad_frame").message;
    expect(refused({ pages: [["home", []]] })).toMatch(/transitions/);
    for (const unvisited of [
      ["home"],
      [["home"]],
      [["home", ["v:a"], "x"]],
      [["a b", ["v:a"]]],
      [["home", "v:a"]],
    ])
      expect(refused({ unvisited }), JSON.stringify(unvisited)).toMatch(/unvisited entry/);
  });
});
